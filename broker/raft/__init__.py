"""Replication: Raft groups driven by one loop over one multiplexed, authenticated transport.

Owns: the Raft core (pysyncobj/, pysyncobj's consensus code vendored; nothing else here knows pysyncobj),
`RaftGroup` (group.py: one replica, our command codec, snapshots through the store), the `Replica` seam (base.py)
and its in-process implementation for tests (inprocess.py), the journal (journal.py), the broker's one Raft loop
and its clock (loop.py, clock.py), the peer transport hub (hub.py) and the store+journal group commit
(group_commit.py).
May import: raftbus.broker.storage, raftbus.client.errors. Never a feature package (log, groups, queues, admin).
"""
