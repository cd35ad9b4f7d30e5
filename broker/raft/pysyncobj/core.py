"""One replica of one Raft group: pysyncobj 0.3.17's `SyncObj` (MIT, see LICENSE beside this file), cut down to
what raftbus runs and corrected in place.

It does no I/O of its own and reads no clock: messages leave through `send(peer, message)` and arrive through
`receive(peer, message)`; time is the injected `clock` (monotonic seconds); entries go to the injected journal;
committed entries go to `apply` (regular commands) and `apply_other` (any other entry but a no-op); snapshots
are written and read by the injected `serialize`/`deserialize`; what a leader sends its followers (entries,
heartbeats, snapshots) is the injected `replicate`. Everything runs on the broker's Raft loop thread, except
`propose`, which any thread may call.

Kept from pysyncobj: elections, votes, appends, the commit and apply rules, leadership transfer (TimeoutNow), the
leader fallback timeout, and its message formats, so replicas of older raftbus brokers understand these.
Changed, each with its test (docs/replication.md, "pysyncobj: adapter or vendored core"):

- nothing is ever unpickled: entries are bytes; pysyncobj's membership and code-version entries are applied as
  no-ops; a chunked `transmission` and a whole snapshot in a message (`serialized`) are refused, since raftbus
  streams snapshots in checked chunks (transfer.py);
- a follower truncates its log only at an entry whose term conflicts with the leader's, keeps what matches, and
  commits no further than the entries the leader's message proved, so a heartbeat without a log position commits
  nothing (pysyncobj truncated after every append whose previous index was below its last entry, dropping entries
  it had acknowledged, and let a heartbeat commit a follower's whole log);
- a successful reply never moves the leader's next index for that follower back, and replies carry the
  replier's term (`term_tag`) so a leader ignores those of an earlier term;
- only voters elect: vote requests and answers from non-voters are dropped, and a replica that is not a voter
  never stands;
- a leader that steps down starts a fresh election timeout;
- proposals leave in one append per follower per tick, a follower's append is not followed by a commit notice
  unless the group asks for it (`eager_commit_notify`), and compaction happens only when asked (`compact`);
- linearizable reads without a log entry (`read_index`, etcd's ReadIndex): every append carries the leader's
  latest read round (`read_round`), a follower's reply echoes it, and a round acknowledged by a majority of
  voters in the leader's term confirms that it still led after the round's reads arrived.
"""
from __future__ import annotations

import logging
import os
import random
import threading
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger(__name__)

REGULAR = 0  # a command's bytes follow the type byte
NO_OP = 1    # a new leader's first entry
# 2 and 3 were pysyncobj's pickled membership and code-version entries: raftbus never writes them and applies
# them as no-ops; raftbus's own entry types (broker/raft/configuration.py) start at 16.
NO_OP_ENTRY = bytes([NO_OP])
_REGULAR_PREFIX = bytes([REGULAR])


class Role:
    """A replica's role: plain ints (compared on every message; an enum's comparison costs ten times as much)."""

    FOLLOWER = 0
    CANDIDATE = 1
    LEADER = 2
    NAMES = ("follower", "candidate", "leader")


_FOLLOWER, _CANDIDATE, _LEADER = Role.FOLLOWER, Role.CANDIDATE, Role.LEADER


class Outcome:
    """How a proposal ended (the values of pysyncobj's FAIL_REASON, which travel in `apply_command_response`)."""

    APPLIED = 0
    QUEUE_FULL = 1
    NO_LEADER = 2
    DISCARDED = 3         # another leader's entry took its place
    NOT_LEADER = 4
    LEADER_CHANGED = 5    # the leader changed before the outcome was known: it may or may not commit
    DENIED = 6
    UNKNOWN = 7           # applied or not: a forwarded command whose index was already applied here


@dataclass(frozen=True)
class RaftOptions:
    election_timeout_min_s: float
    election_timeout_max_s: float
    heartbeat_interval_s: float
    leader_fallback_timeout_s: float
    commands_queue_max: int
    message_bytes_max: int        # the largest append a leader sends (at least one entry)
    snapshot_path: str
    eager_commit_notify: bool = False  # send followers the new commit index after every apply on the leader
    reads_waiting_max: int = 100_000   # reads waiting for a confirmation round or the apply (0: unbounded)
    # renames a new snapshot over the old one (the broker's frees the old file's blocks off the loop thread)
    replace_file: Callable[[str, str], None] = os.replace

    def __post_init__(self):
        if not self.election_timeout_min_s > 3 * self.heartbeat_interval_s:
            raise ValueError("the minimum election timeout must exceed three heartbeat intervals")
        if not self.election_timeout_max_s > self.election_timeout_min_s:
            raise ValueError("the maximum election timeout must exceed the minimum")
        if not self.leader_fallback_timeout_s > self.heartbeat_interval_s > 0:
            raise ValueError("the leader fallback timeout must exceed the heartbeat interval, which must be > 0")
        if self.commands_queue_max < 0 or self.message_bytes_max <= 0 or self.reads_waiting_max < 0:
            raise ValueError("the command and read bounds must be >= 0 and the message bound > 0")


class RaftNode:
    """State other Raft code reads (loop thread): `role`, `term`, `leader_id`, `commit_index`, `applied_index`,
    `noop_index`, `voters` (the other voters), `learners`, `connected`, `next_index`, `match_index`,
    `last_response` (leader: when each peer last answered), `election_deadline`, `log` (the journal), `clock`.
    They change only through the methods below, except the next index, which the leader's sender advances as it
    sends."""

    def __init__(self, self_id: int, voters, *, name: str, journal, options: RaftOptions,
                 clock: Callable[[], float], send: Callable[[int, dict], object],
                 apply: Callable[[int, bytes], object], apply_other: Callable[[int, bytes], object],
                 serialize: Callable, deserialize: Callable, replicate: Callable[[], None],
                 on_role_changed: Callable[[int, int], None], on_tick: Callable[[], None] | None = None):
        self.self_id = self_id
        self.name = name
        self._options = options
        self.clock = clock
        self._send = send
        self._apply = apply
        self._apply_other = apply_other
        self._serialize = serialize
        self._deserialize = deserialize
        self._replicate = replicate
        self._on_role_changed = on_role_changed
        self._on_tick = on_tick
        self._eager_commit_notify = options.eager_commit_notify
        self._handlers = {
            "append_entries": self._on_append_entries, "next_node_idx": self._on_reply,
            "request_vote": self._on_vote_request, "response_vote": self._on_vote,
            "timeout_now": self._on_timeout_now, "apply_command": self._on_forwarded_command,
            "apply_command_response": self._on_forwarded_answer,
        }

        self.voters: set[int] = {int(v) for v in voters} - {self_id}
        self.learners: set[int] = set()
        self.connected: set[int] = set()
        self.is_voter = True  # whether this replica votes (its configuration says so)
        self.role = _FOLLOWER
        self.leader_id: int | None = None
        self._votes = 0
        self.election_deadline = clock() + self._random_timeout()
        self._transfer_in_progress = False  # TimeoutNow received: the outgoing leader's heartbeats are ignored

        self.log = journal
        if len(journal) == 0:
            journal.add(NO_OP_ENTRY, 1, 0)
        # A term survives restarts (an entry's term never exceeds the current one).
        self.term = max(journal.current_term, journal[-1][2])
        self._voted_for = journal.voted_for
        self.commit_index = journal.commit_index
        self.applied_index = 1
        self.next_index: dict[int, int] = {}
        self.match_index: dict[int, int] = {}
        self.last_response: dict[int, float] = {}
        self.noop_index: int | None = None  # the no-op of this replica's last election as leader

        self._queue: deque = deque()  # (entry, callback) proposed since the last tick
        self._queue_lock = threading.Lock()
        self._waiting_commit: defaultdict = defaultdict(list)  # index -> [(term, callback)]
        self._forwarded = 0
        self._waiting_reply: dict[int, Callable] = {}  # forwarded request id -> callback
        self._appending = self._append_pending = False

        # Reads (ReadIndex): queued by any thread, then waiting for a round (`_reads_next`), in the round in flight
        # (`_reads_round`), or confirmed and waiting for the apply (`_reads_confirmed`: (read index, callback)).
        self.read_round = 0            # the last confirmation round started; every append carries it
        self._round_in_flight = False
        self._round_index = 0          # the read index of the round in flight
        self._round_acks: dict[int, int] = {}  # voter -> the highest round it echoed in this term
        self._reads_queue: deque = deque()
        self._reads_next: list = []
        self._reads_round: list = []
        self._reads_confirmed: deque = deque()
        self._reads_waiting = 0

        self.heartbeat_due = 0.0
        self._started = clock()
        self._seconds = 0
        self._snapshot_loaded = False
        self._compaction_asked = False
        self._compaction_at = 0
        self._compaction_keeps_followers = False
        self._last_snapshot_index: int | None = None

    # ------------------------------------------------------------------ state
    @property
    def is_leader(self) -> bool:
        return self.role == _LEADER

    @property
    def first_index(self) -> int:
        return self.log[0][1]

    @property
    def last_index(self) -> int:
        return self.log[-1][1]

    @property
    def last_term(self) -> int:
        return self.log[-1][2]

    @property
    def commands_queued(self) -> bool:
        """Whether proposals wait for the next tick."""
        return bool(self._queue)

    @property
    def reads_waiting(self) -> int:
        """Reads taken and not answered yet (queued, in a round, or waiting for the apply)."""
        return self._reads_waiting

    @property
    def snapshot_path(self) -> str:
        return self._options.snapshot_path

    @property
    def message_bytes_max(self) -> int:
        return self._options.message_bytes_max

    def is_connected(self, peer: int) -> bool:
        return peer in self.connected

    # ------------------------------------------------------------------ proposing (any thread)
    def propose(self, command: bytes, callback) -> None:
        """Append `command` as a regular entry at the next tick (or forward it to the leader); `callback(result,
        outcome)` runs on the loop thread once it is applied here, or refused."""
        self._enqueue(_REGULAR_PREFIX + command, callback)

    def propose_entry(self, entry: bytes, callback) -> None:
        """Like `propose`, for an entry whose first byte is its type (a configuration entry)."""
        self._enqueue(entry, callback)

    def _enqueue(self, entry: bytes, callback) -> None:
        with self._queue_lock:
            full = 0 < self._options.commands_queue_max <= len(self._queue)
            if not full:
                self._queue.append((entry, callback))
        if full:
            self._refuse(Outcome.QUEUE_FULL, callback)

    def _refuse(self, outcome: int, callback) -> None:
        if callback is None:
            return
        if type(callback) is tuple:  # a follower's forwarded command
            peer, request_id = callback
            self._send(peer, {"type": "apply_command_response", "request_id": request_id, "error": outcome})
            return
        callback(None, outcome)

    # ------------------------------------------------------------------ linearizable reads (ReadIndex)
    def read_index(self, callback) -> None:
        """Any thread: `callback(read_index, outcome)` runs once this replica's applied state may answer a read that
        began before this call linearizably: it leads, a heartbeat round it started after this call was acknowledged
        by a majority of its voters in its own term (so no later leader had been elected when the call was made),
        and it has applied up to the commit index of that round's start, and at least its own term's no-op (so every
        entry committed before its term too). Reads waiting together share one round; a read that arrives while a
        round is in flight waits for the next one. `(None, NOT_LEADER)` when it does not lead or stops leading
        first, `(None, NO_LEADER)` with no leader known (both on the loop thread), `(None, QUEUE_FULL)` at once
        beyond `reads_waiting_max`."""
        with self._queue_lock:
            full = 0 < self._options.reads_waiting_max <= self._reads_waiting
            if not full:
                self._reads_waiting += 1
                self._reads_queue.append(callback)
        if full:
            callback(None, Outcome.QUEUE_FULL)

    def _take_reads(self) -> None:
        """The reads queued since the last tick join the next round, started at once unless one is in flight (its
        heartbeats left before these reads arrived, so their acknowledgements prove nothing about them)."""
        with self._queue_lock:
            taken = list(self._reads_queue)
            self._reads_queue.clear()
        if self.role != _LEADER:
            self._answer_reads(taken, None, Outcome.NOT_LEADER if self.leader_id is not None else Outcome.NO_LEADER)
            return
        self._reads_next.extend(taken)
        if not self._round_in_flight:
            self._start_round()

    def _start_round(self) -> None:
        self._reads_round, self._reads_next = self._reads_next, []
        self.read_round += 1
        self._round_in_flight = True
        self._round_index = max(self.commit_index, self.noop_index)
        if not self._confirm_round():  # the only voter confirms alone
            self._send_append_entries()  # every append from now on carries the new round

    def _confirm_round(self) -> bool:
        """Whether a majority of voters (this leader included) acknowledged the round in flight in this term; if so,
        its reads wait only for the apply, and the next round starts."""
        round_, acks = self.read_round, self._round_acks
        count = 1
        for peer in self.voters:
            if acks.get(peer, 0) >= round_:
                count += 1
        if count <= (len(self.voters) + 1) / 2:
            return False
        index, reads = self._round_index, self._reads_round
        self._round_in_flight, self._reads_round = False, []
        self._reads_confirmed.extend((index, callback) for callback in reads)
        self._serve_reads()
        if self._reads_next:
            self._start_round()
        return True

    def _on_read_ack(self, peer: int, round_: int) -> None:
        """A voter's reply in this term to an append that carried `round_`."""
        if round_ > self._round_acks.get(peer, 0):
            self._round_acks[peer] = round_
            if self._round_in_flight and round_ >= self.read_round:
                self._confirm_round()

    def _serve_reads(self) -> None:
        """Answer the confirmed reads whose read index is applied (they are in read-index order)."""
        confirmed, applied = self._reads_confirmed, self.applied_index
        served = []
        while confirmed and confirmed[0][0] <= applied:
            served.append(confirmed.popleft()[1])
        if served:
            self._answer_reads(served, applied, Outcome.APPLIED)

    def _fail_reads(self) -> None:
        """Leadership ended: no waiting read may be answered from this replica's state."""
        failed = self._reads_next + self._reads_round + [callback for _, callback in self._reads_confirmed]
        self._reads_next, self._reads_round = [], []
        self._reads_confirmed.clear()
        self._round_in_flight = False
        self._answer_reads(failed, None, Outcome.NOT_LEADER)

    def _fail_uncommitted(self) -> None:
        """Leadership ended: the proposals this leader appended past its commit index get LEADER_CHANGED now. Their
        entries may still commit under the next leader, or be overwritten; waiting for their index to be applied
        here could take as long as the next leader takes to write that far (for ever on an idle group), so the
        proposer learns at once that the outcome is unknown and retries (idempotently), as a Kafka leader answers
        its pending acks=all requests NOT_LEADER_OR_FOLLOWER. Committed entries not applied yet keep their
        callbacks: they are applied at the next tick whatever the role."""
        failed = [index for index in self._waiting_commit if index > self.commit_index]
        for index in sorted(failed):
            for _, callback in self._waiting_commit.pop(index):
                callback(None, Outcome.LEADER_CHANGED)

    def _answer_reads(self, callbacks, index, outcome: int) -> None:
        if not callbacks:
            return
        with self._queue_lock:
            self._reads_waiting -= len(callbacks)
        for callback in callbacks:
            callback(index, outcome)

    # ------------------------------------------------------------------ ticking (loop thread)
    def tick(self) -> None:
        """Timers, the commit, applying committed entries, appending proposals, compaction."""
        if not self._snapshot_loaded:
            self._snapshot_loaded = True
            if os.path.isfile(self._options.snapshot_path):
                self._load_snapshot(clear_log=False)
        now = self.clock()
        if now - self._started > self._seconds:
            self._seconds += 1
            self.log.save_meta()
        if self.role != _LEADER:
            if not self.is_voter:
                self.election_deadline = now + self._options.election_timeout_max_s  # never stands
            elif self.election_deadline < now and (self.connected or not self.voters):
                self._stand(now)
        if self.role == _LEADER:
            self._advance_commit()
            self._check_followers()
        notify = self._apply_committed()
        if self._reads_queue:
            self._take_reads()
        if self._reads_confirmed:
            self._serve_reads()
        if self.role == _LEADER and (self.clock() > self.heartbeat_due or notify):
            self._send_append_entries()
        if self._queue:
            self._take_proposals()
        if self._compaction_asked:
            self._compact()
        if self._on_tick is not None:
            self._on_tick()

    def _stand(self, now: float) -> None:
        self.election_deadline = now + self._random_timeout()
        self._transfer_in_progress = False
        self.leader_id = None
        self._set_role(_CANDIDATE)
        self._set_term(self.term + 1, self.self_id)
        self._votes = 1
        last_index, last_term = self.last_index, self.last_term
        for peer in self.voters:
            self._send(peer, {"type": "request_vote", "term": self.term, "last_log_index": last_index,
                              "last_log_term": last_term})
        self._on_leader_changed()
        if self._votes > (len(self.voters) + 1) / 2:
            self._become_leader()

    def _advance_commit(self) -> None:
        """The highest index of this term that a majority of voters holds."""
        commit = next_commit = self.commit_index
        last_index = self.last_index
        majority = (len(self.voters) + 1) / 2
        while commit < last_index:
            commit += 1
            count = 1
            for peer in self.voters:
                if self.match_index[peer] >= commit:
                    count += 1
            if count <= majority:
                break
            entries = self._entries(commit, 1)
            if entries and entries[0][2] == self.term:
                next_commit = commit
        if next_commit != self.commit_index:
            self.commit_index = next_commit
            self.log.set_commit_index(next_commit)

    def _check_followers(self) -> None:
        """A leader that has not heard from a majority for the leader fallback timeout steps down."""
        deadline = self.clock() - self._options.leader_fallback_timeout_s
        count = 1
        for peer in self.voters:
            if self.last_response[peer] > deadline:
                count += 1
        if count <= (len(self.voters) + 1) / 2:
            self._set_role(_FOLLOWER)
            self.leader_id = None

    def _apply_committed(self) -> bool:
        """Apply what is committed and not yet applied; whether followers should hear the new commit index now."""
        if self.commit_index <= self.applied_index:
            return False
        for entry, index, term in self._entries(self.applied_index + 1, self.commit_index - self.applied_index):
            waiting = self._waiting_commit.pop(index, None)
            result = self._apply_entry(entry, index)
            if waiting:
                for waiting_term, callback in waiting:
                    if waiting_term == term:
                        callback(result, Outcome.APPLIED)
                    else:
                        callback(None, Outcome.DISCARDED)
            self.applied_index += 1
        return self._eager_commit_notify

    def _apply_entry(self, entry: bytes, index: int):
        kind = entry[0] if entry else None
        if kind == REGULAR:
            return self._apply(index, entry[1:])
        if kind == NO_OP:
            return None
        return self._apply_other(index, entry)

    def _take_proposals(self) -> None:
        """Append (leader) or forward (follower) what was proposed since the last tick, for at most a heartbeat
        interval; the leader's followers get one append for all of it."""
        self._appending = True
        try:
            started = self.clock()
            period = self._options.heartbeat_interval_s
            while self.clock() - started < period:
                try:
                    entry, callback = self._queue.popleft()
                except IndexError:
                    break
                self._take(entry, callback)
        finally:
            self._appending = False
        if self._append_pending:
            self._append_pending = False
            self._send_append_entries()

    def _take(self, entry: bytes, callback) -> None:
        requester = callback if type(callback) is tuple else None
        if self.role == _LEADER:
            index, term = self.last_index + 1, self.term
            self.log.add(entry, index, term)
            if requester is None:
                if callback is not None:
                    self._waiting_commit[index].append((term, callback))
            else:
                self._send(requester[0], {"type": "apply_command_response", "request_id": requester[1],
                                          "log_idx": index, "log_term": term})
            self._send_append_entries()
        elif self.leader_id is not None:
            if requester is None:
                message = {"type": "apply_command", "command": entry}
                if callback is not None:
                    self._forwarded += 1
                    self._waiting_reply[self._forwarded] = callback
                    message["request_id"] = self._forwarded
                self._send(self.leader_id, message)
            else:
                self._send(requester[0], {"type": "apply_command_response", "request_id": requester[1],
                                          "error": Outcome.NOT_LEADER})
        else:
            self._refuse(Outcome.NO_LEADER, callback)

    def _send_append_entries(self) -> None:
        if self._appending:
            self._append_pending = True
            return
        self.heartbeat_due = self.clock() + self._options.heartbeat_interval_s
        self._replicate()

    # ------------------------------------------------------------------ messages (loop thread)
    def receive(self, peer: int, message: dict) -> None:
        """A message of the group from `peer` (a member: the caller drops the rest)."""
        kind = message.get("type")
        if kind in ("request_vote", "response_vote") and (peer not in self.voters or not self.is_voter):
            return  # only voters elect: a non-voter's vote would count towards a false majority
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(peer, message)

    def _refused(self, peer: int, why: str) -> None:
        log.warning("%s: refused a message from node %s: %s", self.name, peer, why)

    def _on_timeout_now(self, peer: int, message: dict) -> None:
        if message["term"] >= self.term and peer == self.leader_id:
            self.election_deadline = 0
            self._transfer_in_progress = True

    def _on_vote_request(self, peer: int, message: dict) -> None:
        term = message["term"]
        if term > self.term:
            self._set_term(term, None)
            self._set_role(_FOLLOWER)
            self.leader_id = None
        if self.role == _LEADER or term < self.term or self._voted_for is not None:
            return
        last_log_term = message["last_log_term"]
        if last_log_term < self.last_term or \
                (last_log_term == self.last_term and message["last_log_index"] < self.last_index):
            return  # the candidate's log is behind ours
        self._set_term(self.term, peer)
        self.election_deadline = self.clock() + self._random_timeout()
        self._send(peer, {"type": "response_vote", "term": term})

    def _on_vote(self, peer: int, message: dict) -> None:
        if self.role == _CANDIDATE and message["term"] == self.term:
            self._votes += 1
            if self._votes > (len(self.voters) + 1) / 2:
                self._become_leader()

    def _on_append_entries(self, peer: int, message: dict) -> None:
        term = message["term"]
        if term < self.term:
            return
        if "transmission" in message:
            self._refused(peer, "a chunked transmission (raftbus sends every entry whole)")
            return
        if message.get("serialized") is not None:
            self._refused(peer, "a snapshot in a message (raftbus streams snapshots in checked chunks)")
            return
        self._follow(peer, term)
        if "prevLogIdx" not in message:
            # A heartbeat to a follower being sent a snapshot: no log position, so it proves nothing of this log.
            self._commit_to(message["commit_index"], self.commit_index)
            return
        verified = self._append(peer, message)
        if verified is not None:
            self._commit_to(message["commit_index"], verified)

    def _follow(self, peer: int, term: int) -> None:
        """An append or a snapshot of `term` (>= ours) from `peer`: it leads."""
        if term > self.term:
            self._transfer_in_progress = False  # a new leader supersedes a pending transfer
        if not self._transfer_in_progress:
            self.election_deadline = self.clock() + self._random_timeout()
        if self.leader_id != peer:
            self._on_leader_changed()
        self.leader_id = peer
        if term > self.term:
            self._set_term(term, None)
        self._set_role(_FOLLOWER)

    def _append(self, peer: int, message: dict) -> int | None:
        """Raft's append rule; the last index the message proved this log to share with the leader's, None when
        the consistency check failed (the leader is told where to resume)."""
        prev_index, prev_term = message["prevLogIdx"], message["prevLogTerm"]
        log_ = self.log
        first, last = log_[0][1], log_[-1][1]
        read_round = message.get("read_round")
        if prev_index is None or not first <= prev_index <= last:
            self._reply(peer, last + 1, success=False, reset=True, read_round=read_round)
            return None
        if log_[prev_index - first][2] != prev_term:
            self._reply(peer, prev_index, success=False, reset=True, read_round=read_round)
            return None
        entries = message.get("entries") or ()
        new = ()
        for position, entry in enumerate(entries):
            index = entry[1]
            if index > last:
                new = entries[position:]
                break
            if log_[index - first][2] != entry[2]:  # a conflict: this entry and all after it are replaced
                if index <= self.applied_index:
                    log.critical("%s: truncating applied log entries from index %d (applied: %d): the state "
                                 "machine has diverged", self.name, index, self.applied_index)
                log_.delete_from(index - first)
                new = entries[position:]
                break
        for entry in new:
            log_.add(*entry)
        verified = entries[-1][1] if entries else prev_index
        self._reply(peer, verified + 1, success=True, read_round=read_round)
        return verified

    def _commit_to(self, leader_commit: int, verified: int) -> None:
        """Follow the leader's commit index, no further than the last index this log is known to share with the
        leader's (`verified`)."""
        last = self.last_index
        if self.commit_index > last:
            self.commit_index = last
        bound = min(verified, last)
        if leader_commit > self.commit_index and bound > self.commit_index:
            self.commit_index = min(leader_commit, bound)
        self.log.set_commit_index(self.commit_index)

    def _reply(self, peer: int, next_index: int | None = None, *, success: bool, reset: bool = False,
               read_round: int | None = None) -> None:
        if next_index is None:
            next_index = self.last_index + 1
        message = {"type": "next_node_idx", "next_node_idx": next_index, "reset": reset, "success": success,
                   "term_tag": self.term}
        if type(read_round) is int:
            message["read_round"] = read_round  # echoed: the leader's read confirmation (read_index)
        self._send(peer, message)

    def _on_reply(self, peer: int, message: dict) -> None:
        if self.role != _LEADER or message.get("term_tag", self.term) != self.term:
            return  # a reply of an earlier term says nothing about this term's log
        match = self.match_index.get(peer)
        if match is None:
            return
        next_index = message["next_node_idx"]
        if message["reset"]:
            self.next_index[peer] = next_index
        if message["success"] and match < next_index - 1:
            self.match_index[peer] = next_index - 1
            if next_index > self.next_index.get(peer, 0):
                self.next_index[peer] = next_index  # optimistic: only a refusal moves it back
        self.last_response[peer] = self.clock()
        round_ = message.get("read_round")
        if round_ is not None and "term_tag" in message and peer in self.voters:
            self._on_read_ack(peer, round_)  # a refusal too: the follower took this leader's term

    def _on_forwarded_command(self, peer: int, message: dict) -> None:
        command = message.get("command")
        if type(command) is not bytes or not command:
            self._refused(peer, "a forwarded command that is not an entry")
            return
        request_id = message.get("request_id")
        self._enqueue(command, (peer, request_id) if "request_id" in message else None)

    def _on_forwarded_answer(self, peer: int, message: dict) -> None:
        callback = self._waiting_reply.pop(message["request_id"], None)
        if callback is None:
            return
        error = message.get("error")
        if error is not None:
            callback(None, error)
        elif message["log_idx"] <= self.applied_index:
            # Applied here already (a snapshot came first, or the leader restarted): the outcome is unknown.
            callback(None, Outcome.UNKNOWN)
        else:
            self._waiting_commit[message["log_idx"]].append((message["log_term"], callback))

    # ------------------------------------------------------------------ what the leader's sender uses
    def append_entries_message(self, next_index: int, entries) -> dict:
        """An append of `entries` (from `next_index` on; none: a heartbeat) in this term."""
        prev_index = next_index - 1
        found = self._entries(prev_index, 1)
        prev_term = found[0][2] if found else None
        return {"type": "append_entries", "term": self.term, "commit_index": self.commit_index, "entries": entries,
                "prevLogIdx": prev_index if found else None, "prevLogTerm": prev_term, "read_round": self.read_round}

    def snapshot_heartbeat_message(self, commit_index: int) -> dict:
        """A heartbeat to a follower whose next entry is compacted away (it is being sent a snapshot); it carries
        no log position, so `commit_index` must not exceed what that follower holds."""
        return {"type": "append_entries", "term": self.term, "serialized": None, "commit_index": commit_index}

    def heard_from(self, peer: int) -> None:
        """`peer` answered (a snapshot acknowledgement): it counts as live for the leader fallback timeout."""
        self.last_response[peer] = self.clock()

    def install_snapshot(self, peer: int, path: str, term: int, commit_index: int) -> bool:
        """A complete, checked snapshot file received from `peer`, leader of `term`: load it in place of this log
        (answering the leader with the new log index); False when `term` is stale."""
        if term < self.term:
            return False
        self._follow(peer, term)
        self._options.replace_file(path, self._options.snapshot_path)
        self._load_snapshot(clear_log=True)
        self._reply(peer, success=True)
        self._commit_to(commit_index, self.last_index)  # a snapshot holds committed entries only
        return True

    # ------------------------------------------------------------------ leadership
    def _become_leader(self) -> None:
        self.leader_id = self.self_id
        self._set_role(_LEADER)
        self.last_response.clear()
        self._round_acks.clear()
        now, next_index = self.clock(), self.last_index + 1
        for peer in self.voters | self.learners:
            self.next_index[peer] = next_index
            self.match_index[peer] = 0
            self.last_response[peer] = now
        self.log.add(NO_OP_ENTRY, next_index, self.term)
        self.noop_index = next_index
        self._send_append_entries()
        self._send_append_entries()

    def transfer_leadership(self, peer: int | None, callback) -> None:
        """Raft's TimeoutNow to `peer` (None: the most caught-up connected voter), only if it holds the whole
        log; `callback(None, outcome)` says whether it was sent."""
        if self.role != _LEADER:
            self._refuse(Outcome.NOT_LEADER, callback)
            return
        if peer is None:
            candidates = [(self.match_index.get(p, 0), p) for p in self.voters if p in self.connected]
            if not candidates:
                self._refuse(Outcome.DENIED, callback)
                return
            peer = max(candidates)[1]
        if peer == self.self_id or peer not in self.voters or self.match_index.get(peer, 0) != self.last_index:
            self._refuse(Outcome.DENIED, callback)
            return
        self._send(peer, {"type": "timeout_now", "term": self.term})
        if callback is not None:
            callback(None, Outcome.APPLIED)

    def step_down(self) -> None:
        self._set_role(_FOLLOWER)
        self.leader_id = None

    def _set_term(self, term: int, voted_for: int | None) -> None:
        """Made durable by the journal before any message reflecting it leaves (journal.DurableMetaStorer)."""
        self.term = term
        self._voted_for = None if voted_for is None else str(voted_for)
        self.log.set_term(term, self._voted_for)

    def _set_role(self, role: int) -> None:
        old, self.role = self.role, role
        if old == role:
            return
        if old == _LEADER:
            self._fail_reads()
            self._fail_uncommitted()
            # A fresh election timeout, as Raft has it: the deadline from before it was elected is long past, and
            # with it a former leader would stand at once when a higher term reaches it (a hand-over's vote
            # request), win with its slightly longer log, and undo the hand-over.
            self.restart_election_timer()
        self._on_role_changed(old, role)

    def _on_leader_changed(self) -> None:
        for request_id in sorted(self._waiting_reply):
            self._waiting_reply[request_id](None, Outcome.LEADER_CHANGED)
        self._waiting_reply = {}

    # ------------------------------------------------------------------ timers
    def _random_timeout(self) -> float:
        low, high = self._options.election_timeout_min_s, self._options.election_timeout_max_s
        return low + (high - low) * random.random()

    def restart_election_timer(self) -> None:
        """A whole, fresh, random election timeout from now."""
        self.election_deadline = self.clock() + self._random_timeout()

    def set_election_timeout(self, seconds: float) -> None:
        """Stand for election `seconds` from now (0: at the next tick), unless a leader is heard first."""
        self.election_deadline = self.clock() + seconds

    def bring_election_forward(self, seconds: float) -> bool:
        """Stand `seconds` from now if that is sooner than the current deadline; whether it was."""
        deadline = self.clock() + seconds
        if deadline < self.election_deadline:
            self.election_deadline = deadline
            return True
        return False

    def heartbeat_at_next_tick(self) -> None:
        self.heartbeat_due = 0.0

    def restart_fallback_timer(self) -> None:
        """Give every connected follower a whole leader fallback timeout to answer again."""
        now = self.clock()
        for peer in self.voters | self.learners:
            if peer in self.connected:
                self.last_response[peer] = now

    # ------------------------------------------------------------------ members and connections
    def peer_connected(self, peer: int) -> None:
        self.connected.add(peer)

    def peer_disconnected(self, peer: int) -> None:
        self.connected.discard(peer)

    def add_voter(self, peer: int) -> bool:
        if peer == self.self_id or peer in self.voters:
            return False
        self.voters.add(peer)
        self.next_index[peer] = self.last_index + 1
        self.match_index[peer] = 0
        if self.role == _LEADER:
            self.last_response[peer] = self.clock()
        return True

    def remove_voter(self, peer: int) -> bool:
        if peer == self.self_id or peer not in self.voters:
            return False
        self.voters.discard(peer)
        self.next_index.pop(peer, None)
        self.match_index.pop(peer, None)
        return True

    def add_learner(self, peer: int) -> None:
        self.learners.add(peer)
        self.next_index[peer] = self.last_index + 1
        self.match_index[peer] = 0
        self.last_response[peer] = self.clock()

    def remove_learner(self, peer: int) -> None:
        self.learners.discard(peer)
        self.next_index.pop(peer, None)
        self.match_index.pop(peer, None)

    # ------------------------------------------------------------------ log and snapshots
    def _entries(self, first: int, count: int):
        start = self.log[0][1]
        if first < start:
            return []
        return self.log[first - start:first - start + count]

    def compact(self, at: int, *, keep_for_followers: bool = False) -> None:
        """At the next tick, snapshot at index `at` (the index the store copy holds; the serializer writes the file)
        and drop the log before it, once the compaction point has reached `at`: the applied index or, with
        `keep_for_followers` on a leader, the lowest match index of the followers that answered within
        `leader_fallback_timeout_s`, so a follower a little behind goes on by appends instead of receiving the whole
        store. A follower silent for longer is not waited for; the caller bounds the log kept by asking without it.
        The entries after `at` stay in the log (the snapshot carries none of them), so a compaction reads and
        writes no entries."""
        self._compaction_asked = True
        self._compaction_at = at
        self._compaction_keeps_followers = keep_for_followers

    def _compaction_point(self) -> int:
        """The index the next compaction would snapshot at (see `compact`)."""
        if self.role == _LEADER and self._compaction_keeps_followers:
            return self.release_point()
        return self.applied_index

    def release_point(self) -> int:
        """The last index whose command the journal may hold in the file only (`AppendJournal.release_through`):
        applied here and, on a leader, held by every follower that answered within `leader_fallback_timeout_s` (the
        entries a live follower still needs are sent from memory; one silent for longer reads them from the file)."""
        point = self.applied_index
        if self.role == _LEADER:
            live_since = self.clock() - self._options.leader_fallback_timeout_s
            for peer in self.voters | self.learners:
                if self.last_response.get(peer, live_since - 1) >= live_since:
                    point = min(point, self.match_index.get(peer, 0))
        return point

    def _compact(self) -> None:
        self._compaction_asked = False
        if self._compaction_point() < self._compaction_at:
            return  # a live follower is behind the store copy: asked again later
        point = self._compaction_at  # the store copy's index: the snapshot holds no entries after it
        entries = self._entries(point - 1, 2)
        if len(entries) < 2 or entries[0][1] == self._last_snapshot_index:
            return
        prev, last = entries
        path = self._options.snapshot_path
        try:
            self._serialize(path + ".tmp", last, prev, sorted(self.voters | {self.self_id}))
            self._options.replace_file(path + ".tmp", path)
        except Exception:
            log.exception("%s: storing the snapshot failed", self.name)
            return
        self.log.delete_to(prev[1] - self.log[0][1])
        self._last_snapshot_index = prev[1]

    def _load_snapshot(self, clear_log: bool) -> None:
        try:
            last, prev, _cluster = self._deserialize(self._options.snapshot_path)
            journal = self.log
            position = self._position_of(prev, last)
            if clear_log or position is None:
                journal.clear()
                journal.add(*prev)
                journal.add(*last)
            elif position:
                # the journal still holds entries before the snapshot: a crash came between the snapshot's rename
                # and the journal's compaction. Drop only those; the entries after `last` stay, as this replica may
                # have acknowledged them to a leader.
                journal.delete_to(position)
            self.applied_index = last[1]
            if self.commit_index > self.last_index:
                log.warning("%s: commit index %d beyond the log's end %d after loading the snapshot (journal entries "
                            "lost in a crash); lowered", self.name, self.commit_index, self.last_index)
                self.commit_index = self.last_index
                journal.set_commit_index(self.commit_index)
        except Exception:
            log.exception("%s: loading the snapshot failed", self.name)

    def _position_of(self, prev, last) -> int | None:
        """Where the journal holds the snapshot's last two entries, `prev` then `last`; None if it does not."""
        journal = self.log
        if len(journal) < 2:
            return None
        position = prev[1] - journal[0][1]
        if position < 0 or position + 1 >= len(journal):
            return None
        return position if journal[position] == prev and journal[position + 1] == last else None

    def close(self) -> None:
        self.log.close()
