"""A leadership hand-over refuses new commands only while it can still happen: not after the replica has stopped
leading (and leads again later), not once the target's broker is gone, and it is not started towards a broker that
is not connected. Real Raft groups over real hubs; a 60 s election timeout keeps every hand-over's window open
for the whole test, so only these rules can end a refusal."""
from __future__ import annotations

import pytest

from raftbus.broker import commands
from tests.cluster.harness import PRODUCER, SLOW_ELECTIONS, RaftCluster, first_leader

pytestmark = pytest.mark.cluster

GROUP = "p1.0"


@pytest.fixture
def cluster(tmp_path):
    """Three nodes, node 1 leading with 3 records committed on every replica."""
    cluster = RaftCluster(tmp_path, settings=SLOW_ELECTIONS)
    first_leader(cluster, 1)
    cluster.run_until(lambda: all(n.groups[GROUP].state_machine.offsets()[1] == 3 for n in cluster.nodes.values()),
                      what="every replica holding the 3 records")
    yield cluster
    cluster.close()


def hand_over(cluster: RaftCluster, source: int, target: int) -> None:
    """Hand leadership from `source` to `target` (asking again while the target is not yet caught up)."""
    def moved() -> bool:
        if cluster.nodes[target].groups[GROUP].is_leader:
            return True
        group = cluster.nodes[source].groups[GROUP]
        if group._handing_over is None:
            group.hand_over(target)
        return False

    cluster.run_until(moved, what=f"node {target} leading after a hand-over from node {source}")


def produce_one(cluster: RaftCluster, node_id: int, sequence: int) -> int:
    """Submit one record at `node_id` (which leads) and run until committed; its offset."""
    future = cluster.nodes[node_id].groups[GROUP].submit(
        commands.encode_produce(2_000 + sequence, PRODUCER, sequence, 1, 2_000 + sequence, b"after"))
    cluster.run_until(future.done, what="the record committed")
    return future.result().base_offset


def test_a_replica_that_leads_again_takes_commands_at_once(cluster):
    """Goal: node 1 hands over to node 2, node 2 hands back; node 1 leads again and takes a command at once (the
    first hand-over's window of one election timeout is still open)."""
    hand_over(cluster, 1, 2)
    hand_over(cluster, 2, 1)
    assert cluster.nodes[1].groups[GROUP].is_leader
    assert produce_one(cluster, 1, 3) == 3


def test_a_hand_over_to_a_broker_that_is_gone_is_not_started(cluster):
    """Goal: node 2 stops after holding every entry (so its last match index still looks caught up); the leader
    does not start a hand-over to it and keeps taking commands (node 3 makes the majority)."""
    cluster.stop(2)
    leader = cluster.nodes[1].groups[GROUP]
    cluster.run_until(lambda: 2 not in cluster.nodes[1].hub.connected_peers(), what="node 1 losing node 2")
    leader.hand_over(2)
    assert leader._handing_over is None
    assert produce_one(cluster, 1, 3) == 3


def test_losing_the_target_ends_the_hand_over(cluster):
    """Goal: node 1 starts a hand-over to node 2, whose broker stops before acting on it; once the connection
    closes, node 1 takes commands again (with node 3) instead of refusing them for an election timeout."""
    leader = cluster.nodes[1].groups[GROUP]
    leader.hand_over(2)
    assert leader._handing_over is not None and leader._handing_over[0] == 2
    cluster.stop(2)
    cluster.run_until(lambda: leader._handing_over is None, what="the hand-over ended")
    assert leader.is_leader
    assert produce_one(cluster, 1, 3) == 3


def test_no_hand_over_starts_while_submitted_commands_wait_to_be_appended(cluster):
    """Goal: a command submitted before the leader's next tick is not yet in its log, so the target cannot hold
    it: no hand-over starts (the target would stand with a shorter log than its peers); once the tick appended it,
    and node 2 holds it, the hand-over goes ahead."""
    leader = cluster.nodes[1].groups[GROUP]
    future = leader.submit(commands.encode_produce(2_003, PRODUCER, 3, 1, 2_003, b"queued"))
    assert leader.raft.commands_queued
    leader.hand_over(2)
    assert leader._handing_over is None and not future.done()
    cluster.run_until(future.done, what="the queued command committed")
    hand_over(cluster, 1, 2)
    assert produce_one(cluster, 2, 4) == 4


def test_the_most_caught_up_voter_is_the_one_holding_most_of_the_log(cluster):
    """Goal: of voters holding the same log the highest id is named; once node 3 stops and node 1 commits one more
    record with node 2, node 2 is named over node 3."""
    leader = cluster.nodes[1].groups[GROUP]
    assert leader.most_caught_up([2, 3]) == 3
    cluster.stop(3)
    produce_one(cluster, 1, 3)
    assert leader.most_caught_up([2, 3]) == 2
