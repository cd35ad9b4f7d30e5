"""The `raftbus` command: app.py (parser, topics, produce, consume, cluster), queues.py and groups.py.

May import anything of the SDK and raftbus.client.bench; nothing imports the CLI.
"""
from raftbus.client.cli.app import main

__all__ = ["main"]
