"""Creating groups, with real Raft groups over real hubs in one process, ticked by hand:
- a vote request that reaches a broker before it opened its replica is kept and answered when the replica opens,
  so the preferred replica wins the group's first election in term 1 (dropped, the group needs a second term);
- a new group is elected and quiesces on every replica without any timer tick (between ticks, as soon as its
  followers answered)."""
from __future__ import annotations

import pytest

from raftbus.broker.raft.early_votes import EarlyVotes
from raftbus.broker.raft.first_election import stagger_first_election
from raftbus.broker.raft.quiesce import Quiescence, QuiesceSettings
from tests.cluster.harness import RaftCluster

pytestmark = pytest.mark.cluster

GROUP = "p1.0"


def start_empty(cluster: RaftCluster, keep_ms: int, quiesce: bool = False) -> None:
    for node_id in (1, 2, 3):
        node = cluster.start(node_id, groups=())
        node.loop.early_votes = EarlyVotes(keep_ms, groups_max=100)
        if quiesce:
            node.loop.quiescence = Quiescence(node.loop, node.hub, node_id, QuiesceSettings(quiesce_after_ms=60_000))
    cluster.run_until(lambda: all(len(n.hub.connected_peers()) == 2 for n in cluster.nodes.values()),
                      what="every hub connected")


def open_replica(cluster: RaftCluster, node_id: int, group_id: str = GROUP):
    group = cluster.nodes[node_id].add_partition(group_id, [1, 2, 3])
    group.preferred_leader = 1
    stagger_first_election(group, node_id, cluster.settings.election_timeout_max_ms)
    return group


def first_election_before_the_peers_open(cluster: RaftCluster) -> None:
    """Node 1 opens the group and stands at once; its vote requests reach nodes 2 and 3 before they open it."""
    candidate = open_replica(cluster, 1)
    cluster.run_until(lambda: candidate.raft.term == 1 and
                      all(cluster.nodes[n].loop.early_votes.kept_total + cluster.nodes[n].loop.dropped_messages
                          for n in (2, 3)), what="the vote requests arrived at nodes 2 and 3")
    open_replica(cluster, 2)
    open_replica(cluster, 3)


def test_a_vote_request_that_came_before_the_replica_is_answered_when_it_opens(raft_cluster):
    cluster = raft_cluster
    start_empty(cluster, keep_ms=5_000)
    first_election_before_the_peers_open(cluster)
    leader = cluster.wait_leader(GROUP)
    assert leader is cluster.nodes[1].groups[GROUP]
    assert leader.raft.term == 1
    assert [cluster.nodes[n].loop.early_votes.delivered_total for n in (2, 3)] == [1, 1]
    assert all(cluster.nodes[n].loop.dropped_messages == 0 for n in (2, 3))


def test_without_keeping_them_the_first_election_is_lost(raft_cluster):
    cluster = raft_cluster
    start_empty(cluster, keep_ms=0)
    first_election_before_the_peers_open(cluster)
    leader = cluster.wait_leader(GROUP)
    assert leader.raft.term >= 2
    assert all(cluster.nodes[n].loop.dropped_messages >= 1 for n in (2, 3))


def test_a_new_group_is_elected_and_quiesces_everywhere_without_a_timer_tick(raft_cluster):
    cluster = raft_cluster
    start_empty(cluster, keep_ms=5_000, quiesce=True)
    for node in cluster.nodes.values():
        node.loop.tick_interval_s = 3600.0  # at most the one timer tick already scheduled runs from here on
    for node_id in (1, 2, 3):
        open_replica(cluster, node_id)
    cluster.run_until(lambda: all(GROUP in n.loop.quiescence.quiesced and GROUP not in n.loop.awake
                                  for n in cluster.nodes.values()), timeout_s=10,
                      what="the group quiesced on every replica")
    leader = cluster.leader(GROUP)
    assert leader is cluster.nodes[1].groups[GROUP] and leader.raft.term == 1
    assert all(n.groups[GROUP].raft.commit_index == leader.raft.commit_index for n in cluster.nodes.values())
    # the leader gossip learns which led groups quiesced or woke (server.Broker._led_updates)
    quiescence = cluster.nodes[1].loop.quiescence
    assert quiescence.take_led_changes() == {GROUP} and quiescence.take_led_changes() == set()
    cluster.produce(1, group_id=GROUP)  # wakes it
    assert GROUP not in quiescence.led and quiescence.take_led_changes() == {GROUP}
