"""Goal: each correction raftbus made to pysyncobj's Raft core holds, shown by driving one `RaftNode` with crafted
messages (a manual clock, a real journal, no sockets): no truncation without a term conflict, no commit beyond what
a message proved, next indexes that never go back on a success, replies of an earlier term ignored, only voters
electing, durable votes before their answers, no decoding of what a peer sends, a fresh election timeout after
stepping down."""
from __future__ import annotations

import os
import pickle

import pytest

from raftbus.broker.raft.journal import AppendJournal
from raftbus.broker.raft.pysyncobj import NO_OP, REGULAR, Outcome, RaftNode, RaftOptions, Role

OPTIONS = dict(election_timeout_min_s=1.0, election_timeout_max_s=2.0, heartbeat_interval_s=0.1,
               leader_fallback_timeout_s=5.0, commands_queue_max=100, message_bytes_max=1 << 20)


class ManualTime:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Replica:
    """One RaftNode with everything it does recorded."""

    def __init__(self, tmp_path, self_id: int = 1, voters=(1, 2, 3), on_send=None, deserialize=None, **options):
        self.clock = ManualTime()
        self.sent: list[tuple[int, dict]] = []
        self.on_send = on_send or (lambda peer, message: self.sent.append((peer, message)))
        self.applied: list[tuple[int, bytes]] = []
        self.other: list[tuple[int, bytes]] = []
        self.roles: list[tuple[Role, Role]] = []
        self.journal = AppendJournal(str(tmp_path / f"node-{self_id}.journal"))
        self.node = RaftNode(
            self_id, voters, name="p1.0", journal=self.journal,
            options=RaftOptions(**{**OPTIONS, **options}, snapshot_path=str(tmp_path / f"node-{self_id}.snapshot")),
            clock=self.clock, send=lambda peer, message: self.on_send(peer, message),
            apply=lambda index, command: self.applied.append((index, command)) or index,
            apply_other=lambda index, entry: self.other.append((index, entry)),
            serialize=None, deserialize=deserialize, replicate=lambda: None,
            on_role_changed=lambda old, new: self.roles.append((old, new)))
        for peer in set(voters) - {self_id}:
            self.node.peer_connected(peer)

    def take_sent(self, kind: str | None = None) -> list[tuple[int, dict]]:
        sent, self.sent = self.sent, []
        return [(peer, m) for peer, m in sent if kind is None or m["type"] == kind]

    def entries(self) -> list[tuple[int, int]]:
        return [(index, term) for _, index, term in self.journal[0:len(self.journal)]]


def command(n: int) -> bytes:
    return bytes([REGULAR]) + f"command-{n}".encode()


def append(term: int, prev: int, prev_term: int, entries, commit: int = 0) -> dict:
    """An append_entries as a leader sends it; `entries` are (index, term) pairs."""
    return {"type": "append_entries", "term": term, "commit_index": commit, "prevLogIdx": prev,
            "prevLogTerm": prev_term, "entries": [(command(i), i, t) for i, t in entries]}


@pytest.fixture
def follower(tmp_path):
    """Node 1, following node 2 in term 1, holding entries 1..6 of term 1 (1 is the initial no-op), none committed."""
    replica = Replica(tmp_path)
    replica.node.receive(2, append(1, 1, 0, [(i, 1) for i in range(2, 7)]))
    assert replica.entries() == [(i, 1 if i > 1 else 0) for i in range(1, 7)]
    replica.take_sent()
    yield replica
    replica.journal.close()


def replies(replica) -> list[dict]:
    return [m for _, m in replica.take_sent("next_node_idx")]


# ---------------------------------------------------------------------------------------------- follower's log
def test_an_append_overlapping_entries_the_follower_holds_truncates_nothing(follower):
    """pysyncobj truncated everything after prevLogIdx when the log was longer: a re-sent or pipelined append for
    entry 3 dropped 4..6, which the leader may already have counted as replicated (acknowledged)."""
    follower.node.receive(2, append(1, 2, 1, [(3, 1)]))
    assert follower.entries()[-1] == (6, 1)
    assert replies(follower) == [{"type": "next_node_idx", "next_node_idx": 4, "reset": False, "success": True,
                                  "term_tag": 1}]
    follower.node.receive(2, append(1, 3, 1, []))  # a heartbeat at an index below the follower's last
    assert follower.entries()[-1] == (6, 1)
    assert replies(follower)[0]["next_node_idx"] == 4


def test_an_append_replaces_the_follower_s_entries_from_the_first_term_conflict(follower):
    follower.node.receive(3, append(2, 3, 1, [(4, 2)]))
    assert follower.entries() == [(1, 0), (2, 1), (3, 1), (4, 2)]
    assert replies(follower)[0]["next_node_idx"] == 5


def test_a_failed_consistency_check_appends_nothing_and_names_where_to_resume(follower):
    follower.node.receive(2, append(1, 9, 1, [(10, 1)]))   # beyond the log
    follower.node.receive(2, append(1, 4, 7, [(5, 1)]))    # a term that does not match
    assert follower.entries()[-1] == (6, 1)
    assert [(r["success"], r["reset"], r["next_node_idx"]) for r in replies(follower)] == [(False, True, 7),
                                                                                          (False, True, 4)]


def test_a_follower_commits_no_further_than_the_entries_a_message_proved(follower):
    """Entries 4..6 came from the term-1 leader and were never committed; the term-2 leader's heartbeat proves only
    entry 3 matches its log. Its commit index (6) must not make the follower apply the unproved 4..6."""
    follower.node.receive(3, append(2, 3, 1, [], commit=6))
    assert follower.node.commit_index == 3
    follower.node.tick()
    assert [index for index, _ in follower.applied] == [2, 3]
    follower.node.receive(3, append(2, 3, 1, [(4, 2), (5, 2)], commit=6))  # entries that replace 4..6
    assert follower.node.commit_index == 5 and follower.entries()[-1] == (5, 2)


def test_a_heartbeat_without_a_log_position_commits_nothing(follower):
    """A leader streaming a snapshot to a follower heartbeats it without a log position: such a message proves
    nothing of the follower's log, whose entries 2..6 (never committed) may be a deposed leader's."""
    before = follower.node.commit_index
    follower.node.receive(3, {"type": "append_entries", "term": 2, "serialized": None, "commit_index": 6})
    assert follower.node.commit_index == before < 2 and follower.node.leader_id == 3
    follower.node.tick()
    assert follower.applied == []


# ---------------------------------------------------------------------------------------------- leader's view
@pytest.fixture
def leader(tmp_path):
    """Node 1, elected in term 1 by node 2's vote; followers 2 and 3 hold the whole log (entry 2, its no-op)."""
    replica = Replica(tmp_path)
    node = replica.node
    replica.clock.now += 3  # past any election deadline
    node.tick()
    assert node.role == Role.CANDIDATE and node.term == 1
    node.receive(2, {"type": "response_vote", "term": 1})
    assert node.role == Role.LEADER and node.noop_index == 2
    for peer in (2, 3):
        node.receive(peer, {"type": "next_node_idx", "next_node_idx": 3, "reset": False, "success": True,
                            "term_tag": 1})
    replica.take_sent()
    yield replica
    replica.journal.close()


def test_a_success_reply_never_moves_the_leader_s_next_index_back(leader):
    """The reply to entry 3 arriving after 4 and 5 were sent (pipelining) must not make the leader send 4 and 5
    again: only a refusal moves the next index back."""
    node = leader.node
    for n in range(3):
        node.propose(b"x", None)
    node.tick()
    node.next_index[2] = 6  # the sender sent 3, 4 and 5 (optimistic next index)
    node.receive(2, {"type": "next_node_idx", "next_node_idx": 4, "reset": False, "success": True, "term_tag": 1})
    assert (node.match_index[2], node.next_index[2]) == (3, 6)
    node.receive(2, {"type": "next_node_idx", "next_node_idx": 4, "reset": True, "success": False, "term_tag": 1})
    assert node.next_index[2] == 4


def test_a_reply_of_an_earlier_term_is_ignored_and_replies_carry_their_term(leader, follower):
    node = leader.node
    node.receive(2, {"type": "next_node_idx", "next_node_idx": 9, "reset": True, "success": True, "term_tag": 0})
    assert (node.match_index[2], node.next_index[2]) == (2, 3)
    follower.node.receive(2, append(1, 6, 1, []))
    assert replies(follower)[0]["term_tag"] == follower.node.term == 1


# ---------------------------------------------------------------------------------------------- elections
def test_only_voters_take_part_in_elections(tmp_path):
    """A vote request or a vote from a non-voter is dropped (pysyncobj counted every vote it received: a learner's
    would make a false majority), and a replica that is not a voter neither answers nor stands."""
    replica = Replica(tmp_path, voters=(1, 2, 3))
    node = replica.node
    node.add_learner(4)
    node.receive(4, {"type": "request_vote", "term": 5, "last_log_index": 9, "last_log_term": 9})
    assert node.term == 0 and not replica.take_sent()
    replica.clock.now += 3
    node.tick()
    assert node.role == Role.CANDIDATE and node.term == 1
    node.receive(4, {"type": "response_vote", "term": 1})
    assert node.role == Role.CANDIDATE
    node.receive(2, {"type": "response_vote", "term": 1})
    assert node.role == Role.LEADER

    learner = Replica(tmp_path, self_id=4, voters=(1, 2, 3))
    learner.node.is_voter = False  # as its configuration installs it (reconfigure.install)
    learner.clock.now += 60
    learner.node.tick()
    assert learner.node.role == Role.FOLLOWER and not learner.take_sent("request_vote")
    learner.node.receive(1, {"type": "request_vote", "term": 7, "last_log_index": 9, "last_log_term": 9})
    assert not learner.take_sent("response_vote")
    learner.journal.close()
    replica.journal.close()


def test_a_vote_is_durable_before_its_answer_leaves(tmp_path):
    """Raft must never forget a vote: the journal holds the term and vote when the answer is handed to send."""
    seen = []
    replica = Replica(tmp_path, on_send=lambda peer, message: seen.append(
        (message["type"], replica.journal.current_term, replica.journal.voted_for)))
    replica.node.receive(2, {"type": "request_vote", "term": 4, "last_log_index": 1, "last_log_term": 0})
    assert seen == [("response_vote", 4, "2")]
    reopened = AppendJournal(str(tmp_path / "node-1.journal"))
    assert (reopened.current_term, reopened.voted_for) == (4, "2")
    reopened.close()
    replica.node.receive(3, {"type": "request_vote", "term": 4, "last_log_index": 1, "last_log_term": 0})
    assert len(seen) == 1  # one vote per term
    replica.journal.close()


def test_a_leader_that_steps_down_starts_a_fresh_election_timeout(leader):
    """The deadline from before its election is long past: without a fresh one a former leader that a higher
    term's vote request deposes (a hand-over's target standing with a log one entry shorter) would stand at its
    next tick, and win with its longer log."""
    node = leader.node
    leader.clock.now += 60
    node.receive(3, {"type": "request_vote", "term": 2, "last_log_index": 1, "last_log_term": 0})
    assert node.role == Role.FOLLOWER and not leader.take_sent("response_vote")  # deposed, vote refused
    assert node.election_deadline - leader.clock.now >= OPTIONS["election_timeout_min_s"]
    node.tick()
    assert node.role == Role.FOLLOWER and node.term == 2


# ---------------------------------------------------------------------------------------------- nothing decoded
class _RunsCommand:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_pysyncobj_s_pickled_entries_apply_as_no_ops_and_chunked_or_whole_snapshots_are_refused(follower, tmp_path):
    """Committed membership (2) and code-version (3) entries holding pickles reach `apply_other` undecoded (the group
    ignores them), never `apply`; a chunked `transmission` and a whole snapshot in a message are refused before
    they change anything: no reply, no new leader or term, no entry."""
    marker = tmp_path / "code-ran"
    exploit = pickle.dumps(_RunsCommand(marker))
    node = follower.node
    node.receive(2, {"type": "append_entries", "term": 1, "commit_index": 8, "prevLogIdx": 6, "prevLogTerm": 1,
                     "entries": [(b"\x02" + exploit, 7, 1), (b"\x03" + exploit, 8, 1)]})
    node.tick()
    assert [index for index, _ in follower.other] == [7, 8] and 7 not in dict(follower.applied)
    follower.take_sent()
    for message in ({"type": "append_entries", "term": 9, "commit_index": 8, "prevLogIdx": 8, "prevLogTerm": 1,
                     "transmission": "finish", "data": exploit},
                    {"type": "append_entries", "term": 9, "commit_index": 8, "serialized": (exploit, True, True)}):
        node.receive(3, message)
    assert not follower.take_sent() and (node.term, node.leader_id, node.last_index) == (1, 2, 8)
    assert not marker.exists()


def test_a_forwarded_command_that_is_not_an_entry_is_refused(leader):
    leader.node.receive(2, {"type": "apply_command", "command": 12, "request_id": 1})
    leader.node.tick()
    assert leader.node.last_index == 2 and not leader.node.commands_queued


# ---------------------------------------------------------------------------------------------- proposals
def test_proposals_apply_in_order_and_answer_once_committed(leader):
    node, outcomes = leader.node, []
    for n in range(3):
        node.propose(f"c{n}".encode(), lambda result, outcome: outcomes.append((result, outcome)))
    node.tick()
    assert node.last_index == 5 and not outcomes
    node.receive(2, {"type": "next_node_idx", "next_node_idx": 6, "reset": False, "success": True, "term_tag": 1})
    node.tick()
    assert outcomes == [(3, Outcome.APPLIED), (4, Outcome.APPLIED), (5, Outcome.APPLIED)]
    assert [command for _, command in leader.applied] == [b"c0", b"c1", b"c2"]
    assert node.log[node.noop_index - node.first_index][0] == bytes([NO_OP])


def test_a_full_proposal_queue_refuses_at_once(tmp_path):
    replica = Replica(tmp_path, commands_queue_max=2)
    outcomes = []
    for _ in range(3):
        replica.node.propose(b"x", lambda result, outcome: outcomes.append(outcome))
    assert outcomes == [Outcome.QUEUE_FULL] and replica.node.commands_queued
    replica.journal.close()


def test_a_deposed_leader_answers_its_uncommitted_proposals_at_once_and_keeps_the_committed_ones(leader):
    """Proposals past the commit index get LEADER_CHANGED the moment the leader steps down, not when (if ever) the
    next leader writes that far: a producer waiting on them in order (Kafka) stalled until its timeout. A committed
    entry not applied yet is still answered APPLIED at the next tick."""
    node, outcomes = leader.node, []
    for n in range(3):
        node.propose(f"c{n}".encode(), lambda result, outcome, n=n: outcomes.append((n, result, outcome)))
    node.tick()
    assert node.last_index == 5
    node.receive(2, {"type": "next_node_idx", "next_node_idx": 4, "reset": False, "success": True, "term_tag": 1})
    node._advance_commit()  # the first step of a tick, which then applies: stop between the two
    assert node.commit_index == 3 and node.applied_index == 2 and not outcomes  # entry 3 committed, not applied
    node.receive(3, {"type": "request_vote", "term": 2, "last_log_index": 3, "last_log_term": 1})
    assert node.role == Role.FOLLOWER
    assert outcomes == [(1, None, Outcome.LEADER_CHANGED), (2, None, Outcome.LEADER_CHANGED)]
    node.tick()
    assert outcomes[2:] == [(0, 3, Outcome.APPLIED)]
    node.receive(3, append(2, 3, 1, [(4, 2)], commit=4))  # the next leader's entry replaces entry 4
    node.tick()
    assert len(outcomes) == 3  # each proposal answered once


@pytest.mark.parametrize("snapshot_term, kept", [
    (1, [(3, 1), (4, 1), (5, 1), (6, 1)]),  # the journal holds the snapshot's entries: only those before it go
    (2, [(3, 2), (4, 2)]),                  # it does not: the snapshot's two entries replace it
])
def test_a_snapshot_newer_than_the_journal_keeps_the_entries_after_it(follower, tmp_path, snapshot_term, kept):
    """A kill between the snapshot's rename and the journal's compaction leaves the whole journal beside a snapshot
    of entries 3 and 4: on restart the entries after the snapshot (which this replica may have acknowledged) stay."""
    held = {index: (cmd, index, term) for cmd, index, term in follower.journal[0:len(follower.journal)]}
    follower.journal.close()
    (tmp_path / "node-1.snapshot").write_bytes(b"snapshot")

    def deserialize(path):
        prev, last = ((held[i][0], i, snapshot_term) for i in (3, 4))
        return last, prev, [1, 2, 3]

    rebooted = Replica(tmp_path, deserialize=deserialize)
    rebooted.node.tick()
    assert rebooted.entries() == kept
    assert rebooted.node.applied_index == 4
    rebooted.journal.close()


# ---------------------------------------------------------------------------------------------- compaction
def test_a_leader_keeps_the_entries_a_live_follower_still_needs(leader):
    """A snapshot is taken at the store copy's index, once the compaction point reached it: with
    keep_for_followers the lowest match index of the followers that answered within leader_fallback_timeout_s,
    else (or once that follower is silent) the applied index. The entries after the copy stay in the log."""
    node, snapshots = leader.node, []
    node._serialize = lambda path, last, prev, cluster: (snapshots.append((prev[1], last[1])),
                                                         open(path, "wb").close())
    for n in range(6):
        node.propose(f"c{n}".encode(), None)
    node.tick()
    _acknowledged(node, 2, 9)
    _acknowledged(node, 3, 5)
    node.tick()
    assert node.applied_index == 8 and node.match_index[3] == 4
    node.compact(5, keep_for_followers=True)
    node.tick()
    assert snapshots == [] and node.first_index == 1  # follower 3 is behind the copy: nothing dropped
    node.compact(3, keep_for_followers=True)
    node.tick()
    assert snapshots == [(2, 3)] and node.first_index == 2  # at the copy: what follower 3 still needs stays
    leader.clock.now += OPTIONS["leader_fallback_timeout_s"] + 1
    _acknowledged(node, 2, 9)
    node.compact(7, keep_for_followers=True)
    node.tick()
    assert snapshots[-1] == (6, 7) and node.first_index == 6  # follower 3 went silent: not waited for
    for n in range(2):
        node.propose(f"d{n}".encode(), None)
    node.tick()
    _acknowledged(node, 2, 11)
    _acknowledged(node, 3, 9)
    node.tick()
    node.compact(11)
    node.tick()
    assert snapshots == [(2, 3), (6, 7)]  # the copy is ahead of what is applied: not yet
    node.compact(9)
    node.tick()
    assert snapshots[-1] == (8, 9) and node.first_index == 8 and node.applied_index == 10


def _acknowledged(node, peer: int, next_index: int) -> None:
    """`peer` holds every entry before `next_index` (a success reply of term 1)."""
    node.receive(peer, {"type": "next_node_idx", "next_node_idx": next_index, "reset": False, "success": True,
                        "term_tag": 1})
