"""`python -m raftbus.bench.peers` (`make bench-peers`): raftbus next to NATS JetStream and Redis Streams.

One run benchmarks raftbus (`raftbus bench all`, unchanged) and then the peers with the same record size, counts,
producer and reader processes, each on its own servers on free loopback ports in a temp dir, and prints one JSON
line per system per workload plus a Markdown table of raftbus / peer ratios. The peers' client libraries
(`nats-py`, `redis`: the `peers` extra) are imported only by the modules of this package that drive them, so the
SDK never depends on them. See docs/peers-benchmark.md for what each figure means and why it is comparable.
"""
