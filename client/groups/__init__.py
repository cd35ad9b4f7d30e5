"""Consumer groups in the SDK: group calls, membership (join, sync, rebalance hooks), heartbeats, the group
fetcher and group descriptions with lag. `raftbus.client.Consumer` is built on these.

May import: the SDK kernel (errors, records, router, settings, wire). Never the SDK facades, cli, bench or spark.
"""
