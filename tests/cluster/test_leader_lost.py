"""A follower whose connection to its leader's broker closes stands for election sooner (RaftGroup.on_peer_lost);
a leader that is alive keeps its term when its connection comes back. Real Raft groups over real hubs."""
from __future__ import annotations

import pytest

from tests.cluster.harness import SLOW_ELECTIONS, RaftCluster, first_leader

pytestmark = pytest.mark.cluster

GROUP = "p1.0"


def test_followers_of_a_stopped_leader_elect_a_new_one_long_before_their_election_timeout(tmp_path):
    """Goal: kill the leader's broker and its followers stand within leader_lost_election_min..max_ms (its
    connections close at once), not a whole election timeout after its last heartbeat; what was committed stays."""
    cluster = RaftCluster(tmp_path, settings=SLOW_ELECTIONS)
    try:
        first_leader(cluster, 1)
        term = cluster.nodes[1].groups[GROUP].term
        cluster.stop(1)
        followers = [cluster.nodes[n].groups[GROUP] for n in (2, 3)]
        cluster.run_until(lambda: all(f._leader_lost == 1 for f in followers), what="both followers losing node 1")
        for follower in followers:
            assert follower.raft.election_deadline - follower.raft.clock() <= 0.6
        new_leader = cluster.run_until(lambda: cluster.leader(), timeout_s=20, what="a new leader")
        assert new_leader.term > term
        cluster.run_until(lambda: new_leader.caught_up_as_leader, what="the new leader serving")
        assert new_leader.state_machine.offsets()[1] == 3
        assert [r.base_offset for r in cluster.produce(2, first_sequence=3)] == [3, 4]
    finally:
        cluster.close()


def test_a_live_leader_whose_connection_drops_and_comes_back_keeps_its_term(tmp_path):
    """Goal: a connection that closes while its leader is alive (here the follower drops it) is dialed again and
    the leader heard from before the early election: no election, same leader and term, and the follower's timer
    is a whole election timeout again."""
    cluster = RaftCluster(tmp_path, settings=SLOW_ELECTIONS)
    try:
        leader = first_leader(cluster, 1)
        term = leader.term
        follower = cluster.nodes[2].groups[GROUP]
        hub = cluster.nodes[2].hub
        hub._lost(hub._ready[1], "dropped by the test")
        assert follower._leader_lost == 1
        assert follower.raft.election_deadline - follower.raft.clock() <= 0.6
        cluster.run_until(lambda: 1 in hub.connected_peers() and follower._leader_lost is None,
                          what="the connection back")
        assert follower.raft.election_deadline - follower.raft.clock() > 30
        settle_until = follower.raft.clock() + 1.0  # past leader_lost_election_max_ms
        cluster.run_until(lambda: follower.raft.clock() > settle_until, what="a second of ticks")
        assert cluster.leader() is leader and leader.term == term
        assert [r.base_offset for r in cluster.produce(1, first_sequence=3)] == [3]
    finally:
        cluster.close()


def test_a_lost_connection_to_a_broker_that_does_not_lead_changes_nothing(tmp_path):
    """Goal: only the leader's connection brings an election forward; losing a fellow follower does not."""
    cluster = RaftCluster(tmp_path, settings=SLOW_ELECTIONS)
    try:
        first_leader(cluster, 1)
        follower = cluster.nodes[2].groups[GROUP]
        before = follower.raft.election_deadline
        cluster.stop(3)
        cluster.run_until(lambda: 3 not in cluster.nodes[2].hub.connected_peers(), what="node 3 gone")
        assert follower._leader_lost is None
        assert follower.raft.election_deadline >= before
    finally:
        cluster.close()


@pytest.mark.parametrize("overrides", [
    {"raft_leader_lost_election_min_ms": 300},  # not above one redial (200) and one heartbeat (150)
    {"raft_leader_lost_election_min_ms": 700, "raft_leader_lost_election_max_ms": 600},
    {"raft_leader_lost_election_max_ms": 1300},  # beyond the election timeout itself
], ids=["min-too-short", "min-above-max", "max-above-election-timeout"])
def test_leader_lost_settings_that_could_disrupt_a_live_leader_are_refused(overrides):
    from raftbus.broker.settings import load_settings
    from raftbus.client import errors

    with pytest.raises(errors.InvalidArgument, match="raft_leader_lost_election"):
        load_settings(**overrides)


def test_leader_lost_settings_reach_the_raft_groups():
    from raftbus.broker.settings import load_settings

    raft = load_settings(raft_leader_lost_election_min_ms=500, raft_leader_lost_election_max_ms=800).raft.group
    assert (raft.leader_lost_election_min_ms, raft.leader_lost_election_max_ms) == (500, 800)
    defaults = load_settings().raft.group
    assert (defaults.leader_lost_election_min_ms, defaults.leader_lost_election_max_ms) == (400, 600)
