"""The `raftbus` command: app.py (parser, topics, produce, consume, cluster), queues.py and groups.py.

The `raftbus` command is its own package (raftbus.cli): it may import the SDK, the broker's process flags
(raftbus.broker.main), raftbus.bench and raftbus.gateway; nothing imports it.
"""

if __name__ != "raftbus.cli":  # installed as a package of its own (setup.py), never as a part of the SDK
    raise ImportError(f"{__name__} is not a module: import raftbus.cli")

from raftbus.cli.app import main

__all__ = ["main"]
