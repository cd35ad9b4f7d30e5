"""Cluster tests: reads confirmed without a log entry (ReadIndex) on real Raft groups over real hubs, ticked by hand:
a leader serves reads without appending anything, and an old leader that was paused and cut off from the new one
serves no read that misses what the new leader committed meanwhile."""
from __future__ import annotations

import time

import pytest

from raftbus.client import errors
from tests.cluster.harness import SLOW_ELECTIONS, RaftCluster, first_leader

pytestmark = pytest.mark.cluster

GROUP = "p1.0"


def high_watermark(group) -> int:
    return group.state_machine.offsets()[1]


def cut(node_a, node_b) -> None:
    """Drop every message of the group between two nodes, both ways (their TCP connection stays up, as a paused
    or partitioned broker's does)."""
    for here, there in ((node_a, node_b), (node_b, node_a)):
        transport = here.groups[GROUP].transport
        receive = transport.receive

        def filtered(peer_id, message, on_fault, receive=receive, there=there.node_id):
            if peer_id != there:
                receive(peer_id, message, on_fault)

        transport.receive = filtered


def heal(*nodes) -> None:
    for node in nodes:
        vars(node.groups[GROUP].transport).pop("receive", None)


def test_a_leader_serves_reads_without_adding_log_entries(tmp_path):
    """Goal: 50 reads confirmed one round after another, and 50 asked together, are all served by the leader with
    every write committed before them, and its log does not grow."""
    cluster = RaftCluster(tmp_path, settings=SLOW_ELECTIONS)
    try:
        leader = first_leader(cluster)
        cluster.produce(5, first_sequence=3)
        last_index = leader.raft.last_index
        for _ in range(50):
            future = leader.confirm_read()
            cluster.run_until(future.done, what="a read confirmed")
            assert future.exception() is None and high_watermark(leader) == 8
        futures = [leader.confirm_read() for _ in range(50)]
        cluster.run_until(lambda: all(f.done() for f in futures), what="50 reads confirmed together")
        assert all(f.exception() is None for f in futures)
        assert leader.raft.last_index == last_index
    finally:
        cluster.close()


def test_a_paused_old_leader_serves_no_read_that_misses_the_new_leader_s_writes(tmp_path):
    """Goal: node 1 leads, is paused and cut off from node 2, which is elected by node 3's vote and commits 5 more
    records; node 1, resumed and still believing it leads, must not answer a read without them: the read waits
    (nothing confirms its round) and, once node 1 hears the new leader, fails with NotLeader."""
    cluster = RaftCluster(tmp_path, settings=SLOW_ELECTIONS)
    try:
        old = first_leader(cluster)
        node1, node2 = cluster.nodes[1], cluster.nodes[2]
        cut(node1, node2)
        paused = cluster.nodes.pop(1)  # not stepped: its loop sends and reads nothing, like SIGSTOP
        node2.groups[GROUP].raft.set_election_timeout(0)
        new = cluster.run_until(lambda: cluster.leader(), what="node 2 elected")
        assert new is node2.groups[GROUP] and new.term > old.term
        cluster.produce(5, first_sequence=3)
        assert high_watermark(new) == 8
        cluster.nodes[1] = paused  # resumed

        served_at: list[int] = []
        read = old.confirm_read()
        read.add_done_callback(lambda f: served_at.append(high_watermark(old)) if f.exception() is None else None)
        deadline = time.monotonic() + 1.0
        cluster.run_until(lambda: read.done() or time.monotonic() > deadline, what="one second of the old leader")
        assert old.is_leader, "the old leader should still believe it leads while cut off"
        assert not read.done(), f"the old leader answered a read at high watermark {served_at}"

        heal(node1, node2)
        cluster.run_until(read.done, what="the old leader's read answered")
        assert isinstance(read.exception(), errors.NotLeader), read.exception()
        assert not old.is_leader and not served_at
    finally:
        cluster.close()
