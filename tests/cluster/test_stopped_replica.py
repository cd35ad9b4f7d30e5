"""Cluster tests: a replica whose store fails while applying a committed entry stops applying (never skips it
and never applies the next entry on top), the other replicas keep committing, and the stopped replica,
reopened on its data dir with a working store, recovers from its journal and the leader to an identical log."""
from __future__ import annotations

import pytest

from raftbus.broker.storage.base import StorageFailure
from tests.cluster.harness import RaftCluster
from tests.cluster.test_raft_groups import GROUP, log_of, replicas_equal
from tests.faulty_store import FaultyStore

pytestmark = pytest.mark.cluster

IO_ERROR = StorageFailure("storage failure: DiskError: mdb_txn_commit: Input/output error")


@pytest.fixture
def raft_cluster(tmp_path):
    cluster = RaftCluster(tmp_path)
    yield cluster
    cluster.close()


def start_faulty(cluster: RaftCluster) -> None:
    for node_id in (1, 2, 3):
        cluster.start(node_id, wrap_store=FaultyStore)


def equal_on(cluster, node_ids, high_watermark):
    groups = [cluster.nodes[n].groups[GROUP] for n in node_ids]
    if any(g.state_machine.offsets()[1] != high_watermark for g in groups):
        return False
    return len({log_of(cluster.nodes[n]) for n in node_ids}) == 1


def test_a_follower_that_cannot_apply_stops_and_catches_up_after_reopening(raft_cluster):
    start_faulty(raft_cluster)
    raft_cluster.produce(50)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 50), what="replicated")
    leader_id = next(n for n, node in raft_cluster.nodes.items() if node.groups[GROUP].is_leader)
    broken_id = next(n for n in raft_cluster.nodes if n != leader_id)
    broken = raft_cluster.nodes[broken_id].groups[GROUP]
    applied_before = broken.state_machine.applied_index()
    broken.store.write_fault = IO_ERROR

    results = raft_cluster.produce(50, first_sequence=50)
    assert [r.base_offset for r in results] == list(range(50, 100))
    raft_cluster.run_until(lambda: broken.stopped, what="the broken replica stopped")
    assert "Input/output error" in broken.stopped and not broken.stopped_disk_full
    results = raft_cluster.produce(20, first_sequence=100)
    assert [r.base_offset for r in results] == list(range(100, 120))
    healthy = [n for n in raft_cluster.nodes if n != broken_id]
    raft_cluster.run_until(lambda: equal_on(raft_cluster, healthy, 120), what="the healthy replicas agree")
    # It tried the one entry once and applied nothing after it.
    assert broken.store.failed_writes == 1
    assert broken.state_machine.applied_index() == applied_before
    assert broken.state_machine.offsets()[1] == 50
    assert not broken.is_leader and broken.submit(b"x").exception(0).code == "UNAVAILABLE"

    raft_cluster.stop(broken_id)
    raft_cluster.start(broken_id)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 120), what="the reopened replica caught up")


def test_a_leader_that_cannot_apply_stops_and_another_replica_takes_over(raft_cluster):
    start_faulty(raft_cluster)
    raft_cluster.produce(30)
    leader = raft_cluster.wait_leader()
    leader_id = next(n for n, node in raft_cluster.nodes.items() if node.groups[GROUP] is leader)
    leader.store.write_fault = IO_ERROR

    from raftbus.broker import commands
    from tests.cluster.harness import PRODUCER
    waiting = leader.submit(commands.encode_produce(1, PRODUCER, 30, 1, 1, b"in flight"))
    raft_cluster.run_until(lambda: leader.stopped, what="the leader stopped")
    assert waiting.exception(0).code == "REQUEST_TIMED_OUT"  # committed elsewhere or not: unknown, retry
    new_leader = raft_cluster.run_until(lambda: raft_cluster.leader(), what="a new leader")
    assert new_leader is not leader
    results = raft_cluster.produce(10, first_sequence=31)
    healthy = [n for n in raft_cluster.nodes if n != leader_id]
    high = results[-1].base_offset + 1
    raft_cluster.run_until(lambda: equal_on(raft_cluster, healthy, high), what="the healthy replicas agree")

    raft_cluster.stop(leader_id)
    raft_cluster.start(leader_id)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, high), what="the reopened replica caught up")


def test_a_leader_on_a_full_disk_refuses_writes_with_disk_full_and_a_new_leader_takes_them(raft_cluster):
    from collections import namedtuple

    from raftbus.broker import commands
    from raftbus.broker.raft.disk import DiskSpace
    from tests.cluster.harness import PRODUCER

    statvfs = namedtuple("StatVfs", "f_bavail f_frsize")
    start_faulty(raft_cluster)
    raft_cluster.produce(10)
    leader = raft_cluster.wait_leader()
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 10), what="replicated")
    leader.disk = DiskSpace("/data", 1 << 20, statvfs=lambda path: statvfs(1, 4096))
    leader.disk.check()
    refused = leader.submit(commands.encode_produce(1, PRODUCER, 10, 1, 1, b"no room"))
    assert refused.exception(0).code == "DISK_FULL" and refused.exception(0).retriable
    leader.hand_over(None)
    raft_cluster.run_until(lambda: raft_cluster.leader() not in (None, leader), what="a leader with room")
    results = raft_cluster.produce(5, first_sequence=10)
    assert [r.base_offset for r in results] == list(range(10, 15))
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 15), what="the full replica still follows")


def test_a_snapshot_that_fails_to_load_stops_the_group_which_neither_votes_nor_acks(tmp_path):
    """A replica whose snapshot is damaged does not start with a frozen state machine: it stops, the others keep
    a leader and commit without it, and once its directory is removed it is rebuilt from the leader."""
    import shutil

    cluster = RaftCluster(tmp_path)
    cluster.settings = cluster.settings.__class__(**{**cluster.settings.__dict__, "log_compaction_entries": 50})
    try:
        for node_id in (1, 2, 3):
            cluster.start(node_id)
        cluster.produce(200)
        cluster.run_until(lambda: replicas_equal(cluster, 200), what="replicated")
        follower_id = next(n for n, node in cluster.nodes.items() if not node.groups[GROUP].is_leader)
        snapshot = cluster.nodes[follower_id].root / GROUP / "raft" / "raft.snapshot"
        cluster.run_until(lambda: snapshot.exists(), what="the follower took a snapshot")
        cluster.stop(follower_id)
        with open(snapshot, "r+b") as f:
            f.truncate(snapshot.stat().st_size // 2)

        damaged = cluster.start(follower_id).groups[GROUP]
        cluster.run_until(lambda: damaged.stopped, what="the damaged replica stopped")
        assert "failed to load" in damaged.stopped
        votes_before = damaged.term
        results = cluster.produce(20, first_sequence=200)
        assert [r.base_offset for r in results] == list(range(200, 220))
        assert damaged.term == votes_before and not damaged.is_leader
        assert damaged.state_machine.offsets()[1] <= 200

        cluster.stop(follower_id)
        shutil.rmtree(cluster.nodes_root(follower_id) / GROUP)
        cluster.start(follower_id)
        cluster.run_until(lambda: replicas_equal(cluster, 220), 30, what="the rebuilt replica caught up")
    finally:
        cluster.close()
