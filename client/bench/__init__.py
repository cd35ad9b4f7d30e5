"""Benchmarks (`raftbus bench ...`, `make bench`, `make bench-peers`): runner.py (workers, clusters, produce and
consume), groups.py, queue.py, ops.py (failover, idle), table.py (the Markdown table) and peers/ (NATS JetStream
and Redis Streams, whose client libraries are the `peers` extra and are imported only there).

A package of its own (raftbus.bench), imported by the CLI; the SDK never imports it.
"""

if __name__ != "raftbus.bench":  # installed as a package of its own (setup.py), never as a part of the SDK
    raise ImportError(f"{__name__} is not a module: import raftbus.bench")
