"""How followers learn the commit index: partition groups carry it on the next append or heartbeat (no extra
message per command), the metadata group sends it at once (real Raft groups over real hubs)."""
from __future__ import annotations

import time

import pytest

from raftbus.broker import commands
from raftbus.broker.raft.group import RaftSettings
from tests.cluster.harness import PRODUCER, RaftCluster

pytestmark = pytest.mark.cluster

GROUP = "p1.0"
COMMANDS = 20
# Heartbeats rare enough that the commands below are not interleaved with many: the count stays about appends.
SLOW_HEARTBEATS = RaftSettings(election_timeout_min_ms=5000, election_timeout_max_ms=7000,
                               heartbeat_interval_ms=1500, leader_fallback_timeout_ms=10000)


@pytest.fixture
def cluster(tmp_path):
    raft_cluster = RaftCluster(tmp_path, settings=SLOW_HEARTBEATS)
    yield raft_cluster
    raft_cluster.close()


def start(cluster, eager: bool):
    for node_id in (1, 2, 3):
        cluster.start(node_id, eager_commit_notify=eager)
    cluster.produce(1)  # elected, and the first command committed and known everywhere
    cluster.run_until(lambda: all(n.groups[GROUP].raft.applied_index == cluster.leader().raft.applied_index
                                  for n in cluster.nodes.values()), what="every replica applied the first command")
    return cluster.leader()


def node_of(cluster, group):
    return next(n for n in cluster.nodes.values() if n.groups[GROUP] is group)


def submit_one(cluster, leader, sequence: int):
    future = leader.submit(commands.encode_produce(2_000 + sequence, PRODUCER, sequence, 1, 2_000 + sequence,
                                                   b"r%d" % sequence))
    cluster.run_until(future.done, what=f"command {sequence} committed")
    return future.result()


def followers_applied(cluster, leader) -> list[int]:
    return [n.groups[GROUP].raft.applied_index for n in cluster.nodes.values() if n.groups[GROUP] is not leader]


def test_partition_leader_sends_one_append_per_follower_per_command(cluster):
    """Committing a command one at a time costs the leader one message per follower, not two: the commit
    index rides on the next append. The followers still apply everything, at the latest on the next heartbeat."""
    leader = start(cluster, eager=False)
    hub = node_of(cluster, leader).hub
    before = hub.stats()["messages_out"]
    for sequence in range(1, COMMANDS + 1):
        submit_one(cluster, leader, sequence)
    sent = hub.stats()["messages_out"] - before
    # Two followers: 2 appends per command, plus at most a few heartbeat rounds (eager sends 4 per command).
    assert 2 * COMMANDS <= sent <= 2 * COMMANDS + 6, sent
    last = leader.raft.applied_index
    cluster.run_until(lambda: followers_applied(cluster, leader) == [last, last], timeout_s=10.0,
                      what="followers applied every command after a heartbeat")
    marks = {n.groups[GROUP].state_machine.offsets()[1] for n in cluster.nodes.values()}
    assert marks == {COMMANDS + 1}


def test_metadata_style_group_tells_followers_the_commit_at_once(cluster):
    """With eager_commit_notify (the metadata group) each commit reaches the followers without waiting for a
    heartbeat: they have applied the command long before the next one is due."""
    leader = start(cluster, eager=True)
    hub = node_of(cluster, leader).hub
    before = hub.stats()["messages_out"]
    for sequence in range(1, 6):
        submit_one(cluster, leader, sequence)
        index = leader.raft.applied_index
        cluster.run_until(lambda: followers_applied(cluster, leader) == [index, index], timeout_s=1.0,
                          what="followers applied the command well before a heartbeat (1.5 s)")
    assert hub.stats()["messages_out"] - before >= 4 * 5


def test_commands_queued_between_two_ticks_go_out_in_one_append_per_follower(cluster):
    """Ten commands submitted before the leader's next tick reach each follower in one message (not one per
    command), and commit with consecutive offsets."""
    leader = start(cluster, eager=False)
    hub = node_of(cluster, leader).hub
    before = hub.stats()["messages_out"]
    futures = [leader.submit(commands.encode_produce(3_000 + i, PRODUCER, 1 + i, 1, 3_000 + i, b"q%d" % i))
               for i in range(10)]
    cluster.run_until(lambda: all(f.done() for f in futures), what="ten queued commands committed")
    assert [f.result().base_offset for f in futures] == list(range(1, 11))
    sent = hub.stats()["messages_out"] - before
    assert 2 <= sent <= 2 + 4, sent  # one append per follower, and at most two heartbeat rounds


def test_new_leader_serves_only_once_it_applied_what_its_predecessor_committed(cluster):
    """Followers may not know the last commit index when the leader fails; the new leader reports
    caught_up_as_leader (what the services check before answering from its state) only once it has applied
    every entry the old leader committed."""
    leader = start(cluster, eager=False)
    for sequence in range(1, COMMANDS + 1):
        submit_one(cluster, leader, sequence)
    old = node_of(cluster, leader).node_id
    cluster.stop(old)
    seen = []

    def serving_leader():
        new_leader = cluster.leader()
        if new_leader is None or not new_leader.caught_up_as_leader:
            return None
        seen.append(new_leader.state_machine.offsets()[1])
        return new_leader

    cluster.run_until(serving_leader, timeout_s=30.0, what="a new leader serving")
    assert seen == [COMMANDS + 1]


def test_a_single_replica_group_commits_in_the_next_loop_pass_not_at_the_next_timer_tick(tmp_path):
    """Goal: a group whose only voter is its leader (replication factor 1) answers a command within a couple of
    loop passes: no follower's answer ticks it again, so it must not wait for the periodic timer tick."""
    cluster = RaftCluster(tmp_path, size=1, settings=SLOW_HEARTBEATS)
    try:
        node = cluster.start(1)
        node.groups[GROUP].raft.set_election_timeout(0)  # stand at once
        leader = cluster.wait_leader()
        cluster.run_until(lambda: leader.caught_up_as_leader, what="the leader serving")
        node.loop.tick_interval_s = 3600.0  # from here on, no periodic tick can commit anything
        node._next = (time.monotonic() + 3600.0, node._next[1])
        future = leader.submit(commands.encode_produce(3_000, PRODUCER, 0, 1, 3_000, b"alone"))
        for _ in range(5):
            node.step()
        assert future.done() and future.result().base_offset == 0
    finally:
        cluster.close()
