"""The `raftbus` command: app.py (parser, topics, produce, consume, cluster), queues.py and groups.py.

The `raftbus` command is its own package (raftbus.cli): it may import the SDK, the broker's process flags
(raftbus.broker.main), raftbus.bench and raftbus.gateway; nothing imports it.
"""

if __name__ != "raftbus.cli":  # installed as a package of its own (setup.py), never as a part of the SDK
    raise ImportError(f"{__name__} is not a module: import raftbus.cli")

import os

# gRPC's C core logs handshake and certificate failures to stderr on its own; the command explains each failure in
# one line of its own (certificate files are checked before gRPC sees them, TLS mismatches are probed), so those
# lines are off unless GRPC_VERBOSITY asks for them. Set before grpc is first imported.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from raftbus.cli.app import main  # noqa: E402

__all__ = ["main"]
