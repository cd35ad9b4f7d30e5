"""Benchmarks (`raftbus bench ...`, `make bench`, `make bench-peers`): runner.py (workers, clusters, produce and
consume), groups.py, queue.py, ops.py (failover, idle), table.py (the Markdown table) and peers/ (NATS JetStream
and Redis Streams, whose client libraries are the `peers` extra and are imported only there).

Imported only by the CLI; the SDK never imports it.
"""
