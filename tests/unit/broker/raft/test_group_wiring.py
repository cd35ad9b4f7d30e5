"""Goal: what a group adds around its Raft core holds without a network: installing a configuration (a promoted
learner keeps its progress, a leader voted out steps down), its channel of the hub (a stopped group neither sends
nor receives, a non-member is not heard), and the sender's snapshot heartbeat (it commits nothing the follower
may not hold, whatever the follower's Raft code does with it)."""
from __future__ import annotations

import pytest

from raftbus.broker.raft import reconfigure
from raftbus.broker.raft.configuration import Membership
from raftbus.broker.raft.group_transport import GroupTransport
from raftbus.broker.raft.pysyncobj import Role
from raftbus.broker.raft.settings import RaftSettings
from raftbus.broker.raft.transfer import Replication
from tests.unit.broker.raft.test_raft_core import Replica


def elect(replica) -> None:
    """Make node 1 the leader of term 1 (node 2 votes for it)."""
    replica.clock.now += 3
    replica.node.tick()
    replica.node.receive(2, {"type": "response_vote", "term": 1})
    assert replica.node.role == Role.LEADER
    replica.take_sent()


class Channel:
    def __init__(self, members):
        self.nodes = set(members)


@pytest.fixture
def leader(tmp_path):
    replica = Replica(tmp_path, voters=(1, 2, 3))
    elect(replica)
    yield replica
    replica.journal.close()


def test_a_promoted_learner_keeps_the_progress_its_leader_tracked(leader):
    node, old = leader.node, Membership.of([1, 2, 3])
    learning = Membership.of([1, 2, 3], [4], index=5)
    reconfigure.install(node, Channel({2, 3}), 1, old, learning, connected={2, 3, 4})
    assert 4 in node.learners and 4 in node.connected and node.match_index[4] == 0
    node.match_index[4], node.next_index[4] = 2, 3  # as its answers moved them
    reconfigure.install(node, Channel({2, 3, 4}), 1, learning, Membership.of([1, 2, 3, 4], index=6), {2, 3, 4})
    assert 4 in node.voters and 4 not in node.learners
    assert (node.match_index[4], node.next_index[4]) == (2, 3)


def test_a_leader_voted_out_of_its_group_steps_down_and_stops_voting(leader):
    node = leader.node
    channel = Channel({2, 3})
    reconfigure.install(node, channel, 1, Membership.of([1, 2, 3]), Membership.of([2, 3], [1], index=7), {2, 3})
    assert node.role == Role.FOLLOWER and node.leader_id is None and not node.is_voter
    reconfigure.install(node, channel, 1, Membership.of([2, 3], [1], index=7), Membership.of([2, 3], index=8), {2, 3})
    assert channel.nodes == {2, 3}


class Recorder:
    def __init__(self):
        self.received, self.sent = [], []

    def receive(self, peer, message):
        self.received.append((peer, message["type"]))

    def on_reply(self, peer):
        self.received.append((peer, "on_reply"))

    def send(self, peer, channel, message):
        self.sent.append((peer, channel, message["type"]))
        return True


def test_a_group_s_channel_hears_members_only_and_a_stopped_group_neither_sends_nor_receives():
    recorder = Recorder()
    channel = GroupTransport(recorder, "p1.0", [2, 3])
    channel.raft = channel.replication = recorder
    channel.deliver(2, {"type": "append_entries"})
    channel.deliver(9, {"type": "append_entries"})        # not a member
    channel.deliver(3, ["not", "a", "message"])
    channel.deliver(3, {"type": "next_node_idx"})
    assert recorder.received == [(2, "append_entries"), (3, "next_node_idx"), (3, "on_reply")]
    assert channel.send(2, {"type": "next_node_idx"}) is True
    channel.stopped = True
    channel.deliver(2, {"type": "append_entries"})
    assert channel.send(2, {"type": "next_node_idx"}) is False
    assert len(recorder.received) == 3 and recorder.sent == [(2, "p1.0", "next_node_idx")]


class Hub:
    def buffered_bytes(self, peer):
        return 0


class Sent:
    def __init__(self):
        self.messages = []
        self.throttle = None

    def send(self, peer, message):
        self.messages.append((peer, message))
        return True


def test_the_heartbeat_to_a_follower_being_sent_a_snapshot_carries_no_commit_beyond_its_match(tmp_path):
    """A follower whose next entry is compacted away gets heartbeats without a log position; a Raft core that lets
    such a heartbeat commit its whole log (pysyncobj's, on brokers not yet upgraded) must not be told a commit
    index beyond what the follower is known to hold."""
    replica = Replica(tmp_path, voters=(1, 2, 3))
    node = replica.node
    elect(replica)
    for n in range(4):
        node.propose(b"x", None)
    node.tick()
    for peer in (2, 3):
        node.receive(peer, {"type": "next_node_idx", "next_node_idx": 7, "reset": False, "success": True,
                            "term_tag": 1})
    node.tick()
    assert node.commit_index == 6
    (tmp_path / "node-1.snapshot").write_bytes(b"a snapshot")
    sent = Sent()
    replication = Replication(sent, "p1.0", RaftSettings(), Hub(), 1, tmp_path, replica.clock)
    replication.attach(node)
    node.next_index[3], node.match_index[3] = 0, 2  # a follower that must be sent the snapshot, known to hold 2
    replication.send_append_entries()
    heartbeats = [m for peer, m in sent.messages if peer == 3 and m["type"] == "append_entries"]
    assert heartbeats and all("prevLogIdx" not in m and m["commit_index"] <= 2 for m in heartbeats)
    assert [m["type"] for peer, m in sent.messages if peer == 3][1:] == ["snapshot_chunk"]
    replication.close()
    replica.journal.close()
