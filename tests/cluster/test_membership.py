"""Cluster tests of membership changes: real Raft groups over real hubs in one process, ticked by hand."""
from __future__ import annotations

import pytest

from raftbus.broker import commands
from raftbus.broker.raft import configuration
from raftbus.client import errors
from tests.cluster.harness import PRODUCER, SLOW_ELECTIONS, RaftCluster
from tests.cluster.test_raft_groups import log_of

pytestmark = pytest.mark.cluster

GROUP = "p1.0"
ORIGINAL = [1, 2, 3]


@pytest.fixture
def cluster(tmp_path):
    cluster = RaftCluster(tmp_path, size=4)
    yield cluster
    cluster.close()


def start_original(cluster) -> None:
    for node_id in ORIGINAL:
        cluster.start(node_id, replicas=ORIGINAL)


def same_log(cluster, node_ids, high_watermark: int) -> bool:
    sms = [cluster.nodes[n].groups[GROUP].state_machine for n in node_ids]
    if any(sm.offsets()[1] != high_watermark for sm in sms):
        return False
    return len({log_of(cluster.nodes[n]) for n in node_ids}) == 1


def add_learner_4(cluster):
    cluster.start(4, replicas=ORIGINAL + [4], learners=[4])
    return cluster.change_membership(lambda m: m.add_learner(4))


def test_learner_catches_up_is_promoted_and_a_voter_is_removed(cluster):
    """A learner receives the whole log without voting, is promoted to voter, a follower is removed, and the
    new voter set commits writes that every remaining replica holds byte for byte."""
    start_original(cluster)
    cluster.produce(200)
    installed = add_learner_4(cluster)
    assert installed.voters == {1, 2, 3} and installed.learners == {4}
    cluster.run_until(lambda: same_log(cluster, [1, 2, 3, 4], 200), what="the learner holding the whole log")
    leader = cluster.wait_leader()
    cluster.run_until(lambda: leader.learner_progress().get(4) == 0, what="the learner caught up")

    promoted = cluster.change_membership(lambda m: m.promote(4))
    assert promoted.voters == {1, 2, 3, 4} and not promoted.learners
    follower = next(n for n in ORIGINAL if n != cluster.wait_leader()._self_id)
    removed = cluster.change_membership(lambda m: m.remove(follower))
    assert removed.voters == {1, 2, 3, 4} - {follower}
    remaining = sorted(removed.voters)
    cluster.run_until(lambda: all(cluster.nodes[n].groups[GROUP].membership == removed for n in remaining),
                      what="every voter applying the new configuration")

    cluster.stop(follower)  # no longer a voter: the other three commit without it
    results = cluster.produce(50, first_sequence=200)
    assert [r.base_offset for r in results] == list(range(200, 250))
    cluster.run_until(lambda: same_log(cluster, remaining, 250), what="identical logs on the new voters")


def test_a_learner_does_not_count_for_the_commit(cluster):
    """With two of three voters down, an entry the leader and the learner both hold stays uncommitted."""
    start_original(cluster)
    cluster.produce(10)
    add_learner_4(cluster)
    cluster.run_until(lambda: same_log(cluster, [1, 2, 3, 4], 10), what="the learner holding the log")
    leader = cluster.wait_leader()
    for node_id in [n for n in ORIGINAL if n != leader._self_id]:
        cluster.stop(node_id)
    before = leader.raft.last_index
    future = leader.submit(commands.encode_produce(5_000, PRODUCER, 10, 1, 5_000, b"only-two-hold-it"))
    leader_log = leader.raft.log
    cluster.run_until(lambda: leader_log[-1][1] > before, what="the leader appending the entry")
    last = leader_log[-1][1]
    learner_log = cluster.nodes[4].groups[GROUP].raft.log
    cluster.run_until(lambda: learner_log[-1][1] >= last, what="the learner holding the new entry")
    assert leader.raft.commit_index < last
    assert not future.done() or not isinstance(future.exception(), type(None))  # never acknowledged


def test_one_change_at_a_time(cluster):
    """A second change proposed before the first is applied is refused with MEMBERSHIP_CHANGE_IN_PROGRESS; a
    change derived from an older configuration is refused when applied; nonsense steps get typed errors."""
    start_original(cluster)
    cluster.start(4, replicas=ORIGINAL + [4], learners=[4])
    cluster.produce(1)
    cluster.change_membership(lambda m: m.add_learner(4))
    leader = cluster.wait_leader()
    first = leader.propose_membership(lambda m: m.promote(4))
    second = leader.propose_membership(lambda m: m.remove(4))
    assert isinstance(second.exception(0), errors.MembershipChangeInProgress)
    cluster.run_until(first.done, what="the first change applied")
    assert first.result().voters == {1, 2, 3, 4}
    with pytest.raises(errors.UnknownBroker):
        leader.propose_membership(lambda m: m.promote(9)).result(0)
    with pytest.raises(errors.InvalidReplicas):
        leader.propose_membership(lambda m: m.remove(leader._self_id)).result(0)

    stale = leader.membership.index - 1
    results = []  # a forged proposal derived from an older configuration changes nothing
    leader.raft.propose_entry(configuration.encode_change(configuration.Membership.of([leader._self_id]), stale),
                              lambda result, reason: results.append(result))
    cluster.run_until(lambda: results, what="the stale change applied")
    assert isinstance(results[0], errors.MembershipChangeInProgress)
    assert leader.membership.voters == {1, 2, 3, 4}


def test_no_change_is_proposed_before_the_leader_applied_its_own_term_or_while_one_waits_in_its_log(tmp_path):
    """Goal: the single-step rule reads the log: a leader whose election no-op is not applied yet, or whose log holds
    a configuration entry not applied yet (here one proposed without the group's bookkeeping), refuses another
    change with MembershipChangeInProgress. Only the leader's node is stepped meanwhile, so nothing commits."""
    cluster = RaftCluster(tmp_path, size=4, settings=SLOW_ELECTIONS)  # only node 1 stands, when told to
    try:
        one_change_at_a_time_by_the_log(cluster)
    finally:
        cluster.close()


def one_change_at_a_time_by_the_log(cluster) -> None:
    for node_id in ORIGINAL:
        cluster.start(node_id, replicas=ORIGINAL)
    nodes = [cluster.nodes[n] for n in ORIGINAL]
    cluster.run_until(lambda: all(len(n.hub.connected_peers()) == 2 for n in nodes), what="the nodes connected")
    candidate = nodes[0].groups[GROUP]
    candidate.raft.set_election_timeout(0)

    def step_until(stepped, predicate, what):
        deadline = candidate.raft.clock() + 20
        while not predicate():
            assert candidate.raft.clock() < deadline, f"timed out waiting for {what}"
            for node in stepped:
                node.step()

    step_until(nodes[:1], lambda: candidate.raft.term == 1, "node 1 standing")
    step_until(nodes[1:], lambda: all(n.groups[GROUP].raft.term == 1 for n in nodes[1:]), "the votes")
    step_until(nodes[:1], lambda: candidate.is_leader, "node 1 elected")
    refused = candidate.propose_membership(lambda m: m.add_learner(4))
    assert isinstance(refused.exception(0), errors.MembershipChangeInProgress)

    cluster.run_until(lambda: candidate.caught_up_as_leader, what="the no-op applied")
    pending = configuration.encode_change(candidate.membership.add_learner(4), candidate.membership.index)
    candidate.raft.propose_entry(pending, None)
    step_until(nodes[:1], lambda: candidate.raft.last_index > candidate.raft.commit_index, "the entry appended")
    refused = candidate.propose_membership(lambda m: m.add_learner(4))
    assert isinstance(refused.exception(0), errors.MembershipChangeInProgress)
    cluster.run_until(lambda: candidate.membership.learners == {4}, what="the pending change applied")


def test_membership_survives_a_restart_from_the_original_replica_list(cluster):
    """Replicas restarted with the replica list they were created with come back with the changed membership,
    from their journals and from a snapshot."""
    start_original(cluster)
    cluster.produce(20)
    add_learner_4(cluster)
    cluster.change_membership(lambda m: m.promote(4))
    cluster.produce(5, first_sequence=20)
    cluster.nodes[2].groups[GROUP].maybe_compact(force=True)
    cluster.run_until(lambda: (cluster.nodes[2].groups[GROUP].data_dir / "raft.snapshot").exists(),
                      what="a snapshot on node 2")
    expected = cluster.wait_leader().membership
    for node_id in (1, 2, 3, 4):
        cluster.stop(node_id)
    for node_id in (1, 2, 3):
        cluster.start(node_id, replicas=ORIGINAL)
    cluster.start(4, replicas=ORIGINAL + [4], learners=[4])
    cluster.run_until(lambda: all(n.groups[GROUP].membership.voters == expected.voters for n in cluster.nodes.values()),
                      what="every replica back on the changed membership")
    results = cluster.produce(5, first_sequence=25)
    assert [r.base_offset for r in results] == list(range(25, 30))


def test_throttled_learner_still_catches_up(cluster):
    """With a catch-up throttle far below the log size, the leader holds the learner back (the throttle refuses
    sends) and the learner still ends with the whole log."""
    start_original(cluster)
    cluster.produce(300, payload=b"y" * 1000)
    leader = cluster.wait_leader()
    leader.set_catch_up_throttle(50_000)
    add_learner_4(cluster)
    cluster.run_until(lambda: same_log(cluster, [1, 2, 3, 4], 300), timeout_s=60, what="the throttled learner")
    throttle = leader.transport.throttle
    assert throttle.refusals > 0 and throttle.bytes_sent >= 300 * 1000


def test_a_learner_behind_the_compacted_log_gets_a_snapshot_with_the_configuration(tmp_path, monkeypatch):
    """When the leader's log no longer holds the start, a new learner is sent a snapshot; the configuration in its
    footer, then the entries after it, give the learner the same configuration as the voters, and it is promoted."""
    from raftbus.broker.raft.group import RaftGroup

    loaded = []
    original_load = RaftGroup._load_snapshot

    def recording_load(group, file_name):
        loaded.append((group._self_id, group.membership.index))
        return original_load(group, file_name)

    monkeypatch.setattr(RaftGroup, "_load_snapshot", recording_load)
    cluster = RaftCluster(tmp_path, size=4)
    cluster.settings = cluster.settings.__class__(**{**cluster.settings.__dict__, "log_compaction_entries": 50})
    try:
        start_original(cluster)
        cluster.produce(10)
        cluster.change_membership(lambda m: m.add_learner(4))
        cluster.change_membership(lambda m: m.remove(4))  # a configuration entry before the snapshot
        cluster.produce(400, first_sequence=10)
        leader = cluster.wait_leader()
        cluster.run_until(lambda: leader.raft.first_index > 50, what="the leader's log compacted")
        cluster.start(4, replicas=ORIGINAL + [4], learners=[4])
        installed = cluster.change_membership(lambda m: m.add_learner(4))
        learner = cluster.nodes[4].groups[GROUP]
        cluster.run_until(lambda: same_log(cluster, [1, 2, 3, 4], 410), 30, what="the learner caught up by snapshot")
        cluster.run_until(lambda: learner.membership == installed, what="the learner on the voters' configuration")
        promoted = cluster.change_membership(lambda m: m.promote(4))
        cluster.run_until(lambda: learner.membership == promoted, what="the learner promoted")
        assert (4, 0) in loaded  # the learner, still on its starting configuration, loaded the leader's snapshot
    finally:
        cluster.close()


def test_only_a_learner_that_connected_and_answered_counts_as_caught_up(cluster):
    """caught_up_learners, what the controller promotes from: a learner whose broker never connected is not
    caught up though the log is a few entries long (its lag would look within any bound), and one that connects
    over the hub and acknowledges the log is."""
    start_original(cluster)
    cluster.produce(3)
    installed = cluster.change_membership(lambda m: m.add_learner(4))  # broker 4 is not running
    assert installed.learners == {4}
    leader = cluster.wait_leader()
    assert leader.learner_progress()[4] <= 64  # a short log: lag alone would call it caught up
    cluster.produce(1, first_sequence=3)  # committed without broker 4
    assert leader.caught_up_learners(64) == set()

    cluster.start(4, replicas=ORIGINAL + [4], learners=[4])
    cluster.run_until(lambda: cluster.wait_leader().caught_up_learners(64) == {4},
                      what="broker 4 connected and caught up")
    assert cluster.wait_leader().caught_up_learners(64) == {4}
