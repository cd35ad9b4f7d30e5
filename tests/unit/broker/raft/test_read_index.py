"""Goal: the Raft core's linearizable reads without a log entry (ReadIndex, `RaftNode.read_index`) follow their
rules, shown with crafted messages on one `RaftNode`: a read is served only after a heartbeat round started after
it arrived is acknowledged by a majority of voters in the leader's current term, and only once the leader applied
the round's commit index and its own term's no-op; reads arriving while a round is in flight wait for the next
one; a leader that stops leading fails every waiting read with NOT_LEADER; no read adds an entry to the log."""
from __future__ import annotations

import pytest

from raftbus.broker.raft.pysyncobj import Outcome, Role
from tests.unit.broker.raft.test_raft_core import Replica, append


class Reads:
    """Reads asked of one node, with what each was answered."""

    def __init__(self, node):
        self.node = node
        self.answers: dict[str, tuple] = {}

    def ask(self, name: str) -> None:
        self.node.read_index(lambda index, outcome: self.answers.setdefault(name, (index, outcome)))

    def served(self) -> set[str]:
        return {name for name, (_, outcome) in self.answers.items() if outcome == Outcome.APPLIED}


def ack(node, peer: int, read_round: int, *, term: int | None = 1, next_index: int = 3, success: bool = True):
    """A follower's reply to an append that carried `read_round` (term_tag None: a reply without one)."""
    message = {"type": "next_node_idx", "next_node_idx": next_index, "reset": not success, "success": success,
               "read_round": read_round}
    if term is not None:
        message["term_tag"] = term
    node.receive(peer, message)


def elect(replica, votes=(2,)) -> None:
    node = replica.node
    replica.clock.now += 3  # past any election deadline
    node.tick()
    assert node.role == Role.CANDIDATE
    for peer in votes:
        node.receive(peer, {"type": "response_vote", "term": node.term})
    assert node.role == Role.LEADER


@pytest.fixture
def leader(tmp_path):
    """Node 1, leader of term 1 over voters 2 and 3, its no-op (entry 2) committed and applied."""
    replica = Replica(tmp_path)
    elect(replica)
    for peer in (2, 3):
        replica.node.receive(peer, {"type": "next_node_idx", "next_node_idx": 3, "reset": False, "success": True,
                                    "term_tag": 1})
    replica.node.tick()
    assert replica.node.applied_index == 2
    replica.take_sent()
    yield replica
    replica.journal.close()


def test_a_read_is_served_once_a_majority_acknowledged_a_round_started_after_it_and_adds_no_entry(leader):
    node, reads = leader.node, Reads(leader.node)
    last_index = node.last_index
    reads.ask("a")
    node.tick()
    assert node.read_round == 1 and not reads.answers
    ack(node, 2, 1)
    assert reads.answers == {"a": (2, Outcome.APPLIED)}
    assert node.last_index == last_index  # no entry, no proposal
    assert not node.commands_queued and node.reads_waiting == 0


def test_every_append_carries_the_round_and_a_follower_echoes_it_even_when_refusing(tmp_path):
    replica = Replica(tmp_path)
    node = replica.node
    assert node.append_entries_message(node.last_index + 1, [])["read_round"] == 0
    node.receive(2, {**append(1, 1, 0, [(2, 1)]), "read_round": 7})
    node.receive(2, {**append(1, 9, 1, []), "read_round": 8})  # a failed consistency check
    answers = [m for _, m in replica.take_sent("next_node_idx")]
    assert [(m["read_round"], m["success"], m["term_tag"]) for m in answers] == [(7, True, 1), (8, False, 1)]
    replica.journal.close()


def test_acknowledgements_of_a_round_started_before_a_read_do_not_confirm_it(leader):
    """Reads that arrive while a round is in flight wait for the next round: the heartbeats of the one in flight
    left before they arrived."""
    node, reads = leader.node, Reads(leader.node)
    reads.ask("first")
    node.tick()
    reads.ask("second")
    node.tick()
    assert node.read_round == 1
    ack(node, 2, 1)
    assert reads.served() == {"first"} and node.read_round == 2  # the next round starts at once
    ack(node, 3, 1)
    assert reads.served() == {"first"}
    ack(node, 3, 2)
    assert reads.served() == {"first", "second"}


def test_confirmation_needs_a_majority_of_voters_answering_in_the_current_term(tmp_path):
    """Five voters and a learner: replies of an earlier term, replies without a term, the learner's and a
    minority's leave the read waiting; the third voter (leader included) confirms it."""
    replica = Replica(tmp_path, voters=(1, 2, 3, 4, 5))
    node = replica.node
    node.add_learner(6)
    node.peer_connected(6)
    elect(replica, votes=(2, 3))
    for peer in (2, 3, 4, 5, 6):
        node.receive(peer, {"type": "next_node_idx", "next_node_idx": 3, "reset": False, "success": True,
                            "term_tag": 1})
    node.tick()
    reads = Reads(node)
    reads.ask("read")
    node.tick()
    ack(node, 2, 1, term=0)      # an earlier term's reply
    ack(node, 3, 1, term=None)   # a reply that names no term
    ack(node, 6, 1)              # the learner
    ack(node, 4, 1)              # one voter: leader + 1 of 5
    assert not reads.answers
    ack(node, 5, 1)
    assert reads.served() == {"read"}
    replica.journal.close()


def test_a_leader_that_stops_leading_fails_every_waiting_read_with_not_leader(tmp_path):
    """A read confirmed but waiting for the apply (of the no-op), one in the round in flight and one waiting for the
    next round all fail when a higher term's leader is heard; a read asked afterwards is refused at once."""
    replica = Replica(tmp_path)
    node, reads = replica.node, Reads(replica.node)
    elect(replica)
    reads.ask("confirmed")
    node.tick()
    ack(node, 2, 1, next_index=2, success=False)  # round 1 confirmed; the no-op is not committed
    reads.ask("in round")
    node.tick()
    reads.ask("next round")
    node.tick()
    assert node.read_round == 2 and not reads.answers and node.reads_waiting == 3
    node.receive(3, append(2, 1, 0, []))  # node 3 leads term 2
    assert node.role == Role.FOLLOWER
    assert reads.answers == {name: (None, Outcome.NOT_LEADER) for name in ("confirmed", "in round", "next round")}
    reads.ask("after")
    node.tick()
    assert reads.answers["after"] == (None, Outcome.NOT_LEADER) and node.reads_waiting == 0
    replica.journal.close()


def test_a_new_leader_serves_no_read_before_its_own_term_s_no_op_is_committed_and_applied(tmp_path):
    """Confirmed leadership is not enough: entries its predecessors committed may not be applied here yet, and
    only its own no-op's commit shows which."""
    replica = Replica(tmp_path)
    node, reads = replica.node, Reads(replica.node)
    elect(replica)
    assert node.commit_index < node.noop_index
    reads.ask("read")
    node.tick()
    ack(node, 2, 1, next_index=2, success=False)  # takes this leader's term but lacks the no-op
    ack(node, 3, 1, next_index=2, success=False)
    node.tick()
    assert not reads.answers and node.applied_index < node.noop_index
    ack(node, 2, 1, next_index=3)
    node.tick()
    assert reads.answers == {"read": (node.noop_index, Outcome.APPLIED)}
    replica.journal.close()


def test_a_follower_refuses_reads_naming_whether_it_knows_a_leader(tmp_path):
    replica = Replica(tmp_path)
    node, reads = replica.node, Reads(replica.node)
    reads.ask("no leader known")
    node.tick()
    node.receive(2, append(1, 1, 0, []))
    reads.ask("led by 2")
    node.tick()
    assert reads.answers == {"no leader known": (None, Outcome.NO_LEADER), "led by 2": (None, Outcome.NOT_LEADER)}
    replica.journal.close()


def test_the_only_voter_confirms_alone(tmp_path):
    replica = Replica(tmp_path, voters=(1,))
    node, reads = replica.node, Reads(replica.node)
    replica.clock.now += 3
    node.tick()
    node.tick()  # commits and applies its no-op
    assert node.role == Role.LEADER and node.applied_index == node.noop_index
    reads.ask("read")
    node.tick()
    assert reads.served() == {"read"}
    replica.journal.close()


def test_reads_beyond_the_bound_are_refused_at_once(tmp_path):
    replica = Replica(tmp_path, reads_waiting_max=2)
    reads = Reads(replica.node)
    for name in ("a", "b", "c"):
        reads.ask(name)
    assert reads.answers == {"c": (None, Outcome.QUEUE_FULL)} and replica.node.reads_waiting == 2
    replica.journal.close()
