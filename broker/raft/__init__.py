"""Replication: pysyncobj groups driven by one loop over one multiplexed, authenticated transport.

Owns: `RaftGroup` (group.py: one pysyncobj group, our command codec, snapshots through the store), the
`Replication` seam (base.py) and its in-process implementation for tests (inprocess.py), the journal
(journal.py), the broker's one Raft loop (loop.py), the peer transport hub (hub.py) and the store+journal
group commit (group_commit.py).
May import: raftbus.broker.storage, raftbus.client.errors. Never a feature package (log, groups, queues, admin).
"""
