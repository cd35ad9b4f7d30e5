"""Cluster tests: real Raft groups over real hubs in one process, ticked by hand."""
from __future__ import annotations

import shutil

import pytest

from raftbus.broker.raft.journal import AppendJournal, JournalCorrupt
from tests.cluster.harness import Node, RaftCluster

pytestmark = pytest.mark.cluster

GROUP = "p1.0"


def log_of(node, group_id=GROUP) -> bytes:
    sm = node.groups[group_id].state_machine
    start, end = sm.offsets()
    return sm.read(start, 1 << 30).batches if end > start else b""


def replicas_equal(cluster, high_watermark: int, group_id=GROUP):
    nodes = list(cluster.nodes.values())
    marks = [n.groups[group_id].state_machine.offsets()[1] for n in nodes]
    if any(m != high_watermark for m in marks):
        return False
    logs = {log_of(n, group_id) for n in nodes}
    return len(logs) == 1 and marks


def test_three_replicas_apply_the_same_log(raft_cluster):
    """Three replicas elect one leader, commit produces with gapless offsets and hold byte-identical logs."""
    for node_id in (1, 2, 3):
        raft_cluster.start(node_id)
    results = raft_cluster.produce(300)
    assert [r.base_offset for r in results] == list(range(300))
    assert not any(r.duplicate for r in results)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 300), what="identical replicas")


def test_retried_batch_is_not_appended_twice(raft_cluster):
    """A batch re-submitted with the same producer sequence returns its original offset and appends nothing."""
    for node_id in (1, 2, 3):
        raft_cluster.start(node_id)
    first = raft_cluster.produce(5)
    again = raft_cluster.produce(1, first_sequence=3)
    assert again[0].duplicate and again[0].base_offset == first[3].base_offset
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 5), what="five records on every replica")


def test_leader_loss_keeps_committed_entries_and_restart_catches_up(raft_cluster):
    """When the leader stops, the others elect a new one that holds every committed entry; the old leader
    restarted on its data dir replays its journal without duplicating and catches up."""
    for node_id in (1, 2, 3):
        raft_cluster.start(node_id)
    raft_cluster.produce(200)
    old = next(n for n in raft_cluster.nodes.values() if n.groups[GROUP].is_leader).node_id
    raft_cluster.stop(old)
    new_leader = raft_cluster.run_until(lambda: raft_cluster.leader(), what="a new leader")
    raft_cluster.run_until(lambda: new_leader.caught_up_as_leader, what="the new leader serving")
    assert new_leader.state_machine.offsets()[1] == 200
    results = raft_cluster.produce(100, first_sequence=200)
    assert [r.base_offset for r in results] == list(range(200, 300))
    raft_cluster.start(old)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 300), what="restarted replica caught up")


def only_ends_in_memory(group) -> bool:
    """The group's journal holds in memory only the commands of its first entry and its last two."""
    journal = group.raft.log
    return group.log_bytes == sum(len(journal[position][0]) for position in (0, -2, -1))


def test_applied_entries_leave_memory_and_a_returning_follower_catches_up_from_the_file(raft_cluster):
    """Entries applied everywhere stay in the journal file only; a follower silent past the leader fallback
    timeout is not waited for, and when it returns the leader reads what it lacks back from the file."""
    for node_id in (1, 2, 3):
        raft_cluster.start(node_id)
    raft_cluster.produce(200)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 200), what="identical replicas")
    raft_cluster.run_until(lambda: all(only_ends_in_memory(n.groups[GROUP]) for n in raft_cluster.nodes.values()),
                           what="every replica's applied log released")
    leader = raft_cluster.leader()
    follower = next(n for n, node in raft_cluster.nodes.items() if not node.groups[GROUP].is_leader)
    raft_cluster.stop(follower)
    raft_cluster.produce(200, first_sequence=200)
    assert raft_cluster.leader() is leader
    raft_cluster.run_until(lambda: only_ends_in_memory(leader), what="the leader's log released without the follower")
    assert len(leader.raft.log) > 200  # not compacted: the follower gets entries, read from the file
    raft_cluster.start(follower)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 400), what="returning follower caught up")
    assert leader.is_leader and leader.raft.first_index == 1


def test_snapshot_brings_an_empty_replica_up_to_date(tmp_path):
    """After log compaction, a replica that starts empty receives the store snapshot plus the journal tail and
    ends with the same log as the others."""
    cluster = RaftCluster(tmp_path)
    cluster.settings = cluster.settings.__class__(**{**cluster.settings.__dict__, "log_compaction_entries": 50})
    try:
        cluster.start(1)
        cluster.start(2)
        cluster.produce(400)
        leader = cluster.leader()
        cluster.run_until(lambda: leader.raft.first_index > 50, what="the leader's log compacted")
        cluster.start(3)
        cluster.run_until(lambda: replicas_equal(cluster, 400), 30, what="empty replica caught up by snapshot")
        cluster.produce(10, first_sequence=400)
        cluster.run_until(lambda: replicas_equal(cluster, 410), what="new entries on every replica")
    finally:
        cluster.close()


def test_a_replica_that_lost_its_data_gets_the_snapshot_once_and_then_appends(raft_cluster):
    """A follower that held the whole log comes back empty after the leader compacted exactly there (the leader's
    match index for it equals the snapshot's last index, so the install's reply cannot move its next index): it is
    sent the snapshot once, and what is written after reaches it by appends."""
    for node_id in (1, 2, 3):
        raft_cluster.start(node_id)
    raft_cluster.produce(30)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 30), what="every replica holding 30 records")
    leader = raft_cluster.leader()
    victim = next(n for n, node in raft_cluster.nodes.items() if node.groups[GROUP] is not leader)
    raft_cluster.stop(victim)
    shutil.rmtree(raft_cluster.nodes_root(victim))
    leader.maybe_compact(force=True)
    raft_cluster.run_until(lambda: leader.raft.first_index > 1, what="the leader's log compacted")
    raft_cluster.start(victim)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 30), what="the empty replica restored")
    raft_cluster.produce(5, first_sequence=30)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 35), what="the new records appended to it")
    assert leader.replication.stats["snapshots_sent"] == 1


def test_compaction_leaves_the_journal_file_to_the_group_commit(raft_cluster):
    """A compaction drops entries from the leader's journal in memory; its file holds them until the group commit
    (`RaftGroup.sync`) rewrites it, and a restart between the two keeps exactly the same log."""
    for node_id in (1, 2, 3):
        raft_cluster.start(node_id)
    raft_cluster.produce(30)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 30), what="every replica holding 30 records")
    leader = raft_cluster.leader()
    leader_id = next(n for n, node in raft_cluster.nodes.items() if node.groups[GROUP] is leader)
    path = leader.raft.log._path
    on_disk = lambda: [e[1] for e in AppendJournal(path)._entries]  # noqa: E731
    first_written = on_disk()[0]
    leader.maybe_compact(force=True)
    raft_cluster.run_until(lambda: leader.raft.first_index > first_written, what="the leader's log compacted")
    assert on_disk()[0] == first_written  # the Raft loop wrote nothing
    raft_cluster.stop(leader_id)  # before a group commit ran: the restart drops them against the snapshot
    raft_cluster.start(leader_id)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 30), what="the same log after the restart")
    restarted = raft_cluster.nodes[leader_id].groups[GROUP]
    raft_cluster.run_until(lambda: restarted.raft.first_index > first_written, what="compacted again on open")
    restarted.sync()
    assert on_disk()[0] == restarted.raft.first_index  # the group commit rewrote the file
    raft_cluster.produce(5, first_sequence=30)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 35), what="appends after the rewrite")


def test_a_journal_that_starts_after_index_1_without_a_snapshot_is_refused(raft_cluster):
    """A journal whose first entries are gone while no snapshot covers them (a damaged data directory) must not
    start a replica that would vote and acknowledge without them: opening the group raises JournalCorrupt."""
    for node_id in (1, 2, 3):
        raft_cluster.start(node_id)
    raft_cluster.produce(20)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 20), what="every replica holding 20 records")
    raft_cluster.stop(3)
    raft_dir = raft_cluster.nodes_root(3) / GROUP / "raft"
    assert not (raft_dir / "raft.snapshot").exists()
    journal = AppendJournal(str(raft_dir / "raft.journal"))
    journal.delete_to(5)
    assert journal.rewrite_compacted()
    journal.close()
    node = Node(3, raft_cluster.addresses, raft_cluster.root, raft_cluster.settings)
    try:
        with pytest.raises(JournalCorrupt):
            node.add_partition(GROUP, [1, 2, 3])
    finally:
        node.close()


def test_full_restart_from_data_dirs(raft_cluster):
    """Stopping every replica and starting them again on their data dirs keeps the log exactly as it was."""
    for node_id in (1, 2, 3):
        raft_cluster.start(node_id)
    raft_cluster.produce(150)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 150), what="replicated before restart")
    before = log_of(raft_cluster.nodes[1])
    for node_id in (1, 2, 3):
        raft_cluster.stop(node_id)
    for node_id in (1, 2, 3):
        raft_cluster.start(node_id)
    raft_cluster.wait_leader()
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 150), what="same log after restart")
    assert log_of(raft_cluster.nodes[2]) == before
    results = raft_cluster.produce(10, first_sequence=150)
    assert [r.base_offset for r in results] == list(range(150, 160))


def test_hand_over_moves_leadership_to_the_target_while_new_writes_wait(raft_cluster):
    """A leader handing over refuses new commands with a retriable LEADER_NOT_AVAILABLE naming the target, the
    target becomes leader, keeps every committed entry, and the old leader's replica stays a follower."""
    from raftbus.broker import commands
    from raftbus.client import errors
    from tests.cluster.harness import PRODUCER

    for node_id in (1, 2, 3):
        raft_cluster.start(node_id)
    raft_cluster.produce(50)
    old = next(n for n in raft_cluster.nodes.values() if n.groups[GROUP].is_leader)
    target = next(n for n in raft_cluster.nodes if n != old.node_id)
    raft_cluster.run_until(lambda: replicas_equal(raft_cluster, 50), what="every replica caught up")
    old.groups[GROUP].hand_over(target)
    waiting = old.groups[GROUP].submit(commands.encode_produce(1, PRODUCER, 50, 1, 1, b"late"))
    assert isinstance(waiting.exception(0), errors.LeaderNotAvailable)
    assert waiting.exception(0).leader_id == target
    raft_cluster.run_until(lambda: raft_cluster.nodes[target].groups[GROUP].is_leader, what="the target leads")
    assert not old.groups[GROUP].is_leader
    results = raft_cluster.produce(10, first_sequence=50)
    assert [r.base_offset for r in results] == list(range(50, 60))
