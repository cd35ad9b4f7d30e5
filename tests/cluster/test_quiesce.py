"""Quiescence of idle groups, with real Raft groups over real hubs in one process, ticked by hand: idle groups
stop ticking on every replica, a write or a read wakes the group, and a lost or silent leader's groups elect new
leaders."""
from __future__ import annotations

import pytest

from raftbus.broker.raft.quiesce import Quiescence, QuiesceSettings, leader_idle
from tests.cluster.harness import RaftCluster

pytestmark = pytest.mark.cluster

GROUPS = ("p1.0", "p1.1", "p1.2", "p1.3")
SETTINGS = QuiesceSettings(quiesce_after_ms=200, liveness_interval_ms=50, liveness_timeout_ms=400)


@pytest.fixture
def cluster(tmp_path):
    cluster = RaftCluster(tmp_path)
    for node_id in (1, 2, 3):
        start(cluster, node_id)
    yield cluster
    cluster.close()


def start(cluster: RaftCluster, node_id: int, settings: QuiesceSettings = SETTINGS):
    node = cluster.start(node_id, groups=GROUPS)
    node.loop.quiescence = Quiescence(node.loop, node.hub, node_id, settings)
    node.loop.stopped_listeners.append(node.loop.quiescence.on_group_stopped)
    return node


def quiesced_everywhere(cluster: RaftCluster, groups=GROUPS) -> bool:
    return all(g in node.loop.quiescence.quiesced and g not in node.loop.awake
               for node in cluster.nodes.values() for g in groups)


def leaders(cluster: RaftCluster) -> dict:
    found = {g: cluster.leader(g) for g in GROUPS}
    return found if all(found.values()) else {}


def commit_one_on_each(cluster: RaftCluster, sequence: int) -> None:
    for group_id in GROUPS:
        cluster.produce(1, group_id=group_id, first_sequence=sequence)


def applied_everywhere(cluster: RaftCluster, group_id: str, high_watermark: int) -> bool:
    return all(n.groups[group_id].state_machine.offsets()[1] == high_watermark for n in cluster.nodes.values())


def test_idle_groups_quiesce_on_every_replica_and_stop_heartbeating(cluster):
    cluster.run_until(lambda: leaders(cluster), what="a leader per group")
    cluster.run_until(lambda: quiesced_everywhere(cluster), what="every group quiesced on every replica")
    leader_node = next(n for n in cluster.nodes.values() if n.groups["p1.0"].is_leader)
    sent = leader_node.hub.stats()["messages_out"]
    for _ in range(200):
        for node in cluster.nodes.values():
            node.step()
    # only liveness messages (one per peer per liveness interval), no per-group heartbeats or answers
    assert quiesced_everywhere(cluster)
    assert all(n.groups[g].raft.leader_id is not None for n in cluster.nodes.values() for g in GROUPS)
    assert leader_node.hub.stats()["messages_out"] - sent < 200


def test_a_write_wakes_a_quiesced_group_commits_everywhere_and_it_quiesces_again(cluster):
    cluster.run_until(lambda: quiesced_everywhere(cluster), what="every group quiesced")
    results = cluster.produce(3, group_id="p1.2")
    assert [r.base_offset for r in results] == [0, 1, 2]
    cluster.run_until(lambda: applied_everywhere(cluster, "p1.2", 3), what="the write applied on every replica")
    cluster.run_until(lambda: quiesced_everywhere(cluster), what="quiesced again after the write")
    assert applied_everywhere(cluster, "p1.2", 3)


def test_a_read_wakes_a_quiesced_group_is_confirmed_without_an_entry_and_the_group_quiesces_again(cluster):
    """A linearizable read (ReadIndex) of a quiesced group wakes it, keeps its leader from quiescing while it waits,
    is served, and adds no entry to any replica's log."""
    cluster.produce(2, group_id="p1.1")
    cluster.run_until(lambda: quiesced_everywhere(cluster), what="every group quiesced")
    group = cluster.leader("p1.1")
    last_indexes = {n.node_id: n.groups["p1.1"].raft.last_index for n in cluster.nodes.values()}
    read = group.confirm_read()
    assert not leader_idle(group), "a leader with a read waiting counts as idle"
    cluster.run_until(read.done, what="the read confirmed")
    assert read.exception() is None and group.state_machine.offsets()[1] == 2
    cluster.run_until(lambda: quiesced_everywhere(cluster), what="quiesced again after the read")
    assert {n.node_id: n.groups["p1.1"].raft.last_index for n in cluster.nodes.values()} == last_indexes


def test_losing_the_leaders_broker_elects_new_leaders_for_its_quiesced_groups(cluster):
    cluster.run_until(lambda: quiesced_everywhere(cluster), what="every group quiesced")
    led = {g: next(n.node_id for n in cluster.nodes.values() if n.groups[g].is_leader) for g in GROUPS}
    victim = led["p1.0"]
    cluster.stop(victim)
    cluster.run_until(lambda: leaders(cluster), what="a leader per group on the remaining brokers")
    assert all(cluster.leader(g).raft.self_id != victim for g in GROUPS)
    commit_one_on_each(cluster, 0)
    cluster.run_until(lambda: all(applied_everywhere(cluster, g, 1) for g in GROUPS),
                      what="the writes applied on both remaining replicas")


def test_a_silent_leaders_broker_is_replaced_while_its_connections_stay_open(cluster):
    """A leading broker that stops running (SIGSTOP: its connections stay open) sends no liveness messages; the
    other replicas wake its groups and elect new leaders."""
    cluster.run_until(lambda: quiesced_everywhere(cluster), what="every group quiesced")
    victim = next(n for n in cluster.nodes.values() if n.groups["p1.1"].is_leader)
    frozen = cluster.nodes.pop(victim.node_id)  # no longer stepped, hub still connected
    try:
        cluster.run_until(lambda: cluster.leader("p1.1") is not None and
                          cluster.leader("p1.1").term > frozen.groups["p1.1"].term,
                          what="a new leader of p1.1 in a later term")
        results = cluster.produce(2, group_id="p1.1")
        assert [r.base_offset for r in results] == [0, 1]
    finally:
        cluster.nodes[victim.node_id] = frozen
    cluster.run_until(lambda: applied_everywhere(cluster, "p1.1", 2), what="the resumed broker catching up")


def test_a_stopped_leader_replica_wakes_its_followers_which_elect_another(cluster):
    cluster.run_until(lambda: quiesced_everywhere(cluster), what="every group quiesced")
    leader = cluster.run_until(lambda: cluster.leader("p1.3"), what="a leader of p1.3")
    leader.stop("test: the store failed")
    cluster.run_until(lambda: cluster.leader("p1.3") not in (None, leader), what="another leader of p1.3")


def test_a_quiesced_leaders_in_sync_replicas_follow_its_followers_brokers_liveness(cluster):
    """A quiesced group's followers send nothing; its leader counts a follower in sync while that follower's broker
    is heard, and leaves it out once it falls silent (SIGSTOP: its connections stay open)."""
    cluster.run_until(lambda: quiesced_everywhere(cluster), what="every group quiesced")
    leader = next(n for n in cluster.nodes.values() if n.groups["p1.0"].is_leader)
    group = leader.groups["p1.0"]
    assert group.in_sync_replicas(leader.node_id) == [1, 2, 3]
    victim = next(n for n in (1, 2, 3) if n != leader.node_id)
    frozen = cluster.nodes.pop(victim)
    try:
        cluster.run_until(lambda: victim not in group.in_sync_replicas(leader.node_id),
                          what="the silent follower left out of the in-sync replicas")
        assert group.in_sync_replicas(leader.node_id) == sorted({1, 2, 3} - {victim})
    finally:
        cluster.nodes[victim] = frozen
    cluster.run_until(lambda: group.in_sync_replicas(leader.node_id) == [1, 2, 3],
                      what="the follower back in sync once its broker is heard again")


def test_groups_with_nothing_since_their_election_quiesce_at_once_and_others_wait_the_idle_time(tmp_path):
    """New groups (only their leader's election no-op in the log) do not wait raft_quiesce_after_ms; a group that
    took a command does."""
    cluster = RaftCluster(tmp_path)
    try:
        for node_id in (1, 2, 3):
            start(cluster, node_id, QuiesceSettings(quiesce_after_ms=600_000, liveness_interval_ms=50,
                                                    liveness_timeout_ms=400))
        cluster.run_until(lambda: quiesced_everywhere(cluster), what="every new group quiesced")
        cluster.produce(1, group_id="p1.2")
        cluster.run_until(lambda: applied_everywhere(cluster, "p1.2", 1), what="the write applied everywhere")
        for _ in range(300):
            for node in cluster.nodes.values():
                node.step()
        assert not quiesced_everywhere(cluster, ["p1.2"])
        assert quiesced_everywhere(cluster, [g for g in GROUPS if g != "p1.2"])
    finally:
        cluster.close()
