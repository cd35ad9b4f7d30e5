"""How one queue command moves messages between states: indexes, counters, fair leaves and due work.

`MessageMoves` wraps the command's write transaction; the command handlers (queue_work.QueueWork) build on it.
Counters (per partition and per group) and fair-rotation cursors are cached for the command and written once
by `finish`, with the applied Raft index.
"""
from __future__ import annotations

import struct
from collections import Counter

from raftbus.broker.queues import commands as queue_commands
from raftbus.broker.queues.state.backoff import retry_delay_ms
from raftbus.broker.queues.state.fair import FairRotation, group_path
from raftbus.broker.queues.state import runs
from raftbus.broker.queues.state.reads import due_in, in_flight_entry, stored_message
from raftbus.broker.queues.state.records import (
    DEAD,
    DELAYED,
    IN_FLIGHT,
    READY,
    StoredMessage,
    encode_message,
    ready_value,
    row_key,
    seq_key,
    seq_of,
    time_key,
    time_of,
)
from raftbus.broker.queues.state.tables import (
    CURSORS,
    DELAYED_T,
    EXPIRES,
    GROUP,
    GROUPS,
    IDEMPOTENCY,
    IDEMPOTENCY_EXPIRY,
    IN_FLIGHT_T,
    INDEX_OF,
    LEAVES,
    LOCATORS,
    MESSAGES,
    META,
    PRODUCER_EXPIRY,
    PRODUCERS,
    SEQ,
    SETTLER_EXPIRY,
    SETTLERS,
    STATE,
    STATE_KEY,
    Due,
    READY_T,
    QueueState,
    time8_of,
)

LEASE_EXPIRED = b"lease expired"
NO_STATE = 0  # count_moves: where new messages come from and removed ones go
IDEMPOTENCY_VALUE = struct.Struct(">Qq")  # seq, expires_ms


class MessageMoves:
    """One command's changes over its write transaction: every state change of a message goes through
    enter/leave/move/remove, which keep the indexes, the counters and the fair rotation in step."""

    def __init__(self, txn, state: QueueState, now_ms: int, policy: queue_commands.QueuePolicy, fair: bool,
                 kept_leases: tuple[int, int] | None = None):
        self.txn = txn
        self.now = now_ms
        self.kept_leases = kept_leases  # (after, until]: deadlines of leases a new leader's grace keeps
        self.policy = policy
        self.fair = fair
        self.counts = [0, state.ready, state.delayed, state.in_flight, state.dead]
        self.next_seq = state.next_seq
        self._groups: dict[bytes, list[int]] = {}
        self._leaves: dict[bytes, bool] = {}
        self.rotation = FairRotation(txn, LEAVES, CURSORS) if fair else None
        self.runs = runs.RunFinder(txn)  # fair partitions never hold runs: it finds none there

    # ------------------------------------------------------------------ messages and indexes
    def message(self, seq: int) -> StoredMessage | None:
        """The message of a seq as a row: a message still inside a run opens the run first (runs.py)."""
        m = stored_message(self.txn, seq)
        if m is None and self.runs.any and self.open_run_of(seq):
            m = stored_message(self.txn, seq)
        return m

    def open_run_of(self, seq: int) -> bool:
        """Open the run holding `seq` if the message is live in it; whether it was."""
        key = self.runs.run_key(seq)
        run = None if key is None else runs.load_run(self.txn, key)
        if run is None:
            return False
        i = run.index_of(seq)
        if i is None or run.states[i] == runs.GONE:
            return False
        self.open_run(run)
        return True

    def open_run(self, run: runs.Run) -> None:
        """Turn a run's live messages into rows (with their locators and ready entries) and drop the run: the
        counters do not change, and in-flight messages are already listed in the in-flight index."""
        rows, locators, ready = [], [], []
        for i in range(run.n):
            state = run.states[i]
            if state == runs.GONE:
                continue
            key = run.row_key(i)
            row = run.message_row(i)
            rows.append((key, row))
            locators.append((key[-8:], key))
            if state == READY:
                ready.append((key, ready_value(run.enqueued_ms, run.group)))
        txn = self.txn
        txn.put_new_many(MESSAGES, rows)
        txn.put_new_many(LOCATORS, locators)
        txn.put_new_many(READY_T, ready)
        entry = run.ready_entry()
        if entry is not None:
            txn.delete(runs.RUN_READY, entry[0])
        txn.delete(runs.RUNS, run.key)
        txn.delete(runs.RUN_STATE, run.key)
        runs.drop_from_batch(txn, run)

    def open_runs_in_flight(self, deadline_ms: int, packed_seqs: bytes) -> None:
        """Open the runs holding any of these seqs in flight under deadline_ms (their lease has expired)."""
        loaded: dict[bytes, runs.Run | None] = {}
        for (seq,) in SEQ.iter_unpack(packed_seqs):
            key = self.runs.run_key(seq)
            if key is None:
                continue
            run = loaded[key] if key in loaded else loaded.setdefault(key, runs.load_run(self.txn, key))
            if run is None:
                continue
            i = run.index_of(seq)
            if i is not None and run.states[i] == IN_FLIGHT and run.deadlines[i] == deadline_ms:
                self.open_run(run)
                loaded[key] = None  # opened: its messages are rows now

    def row_key(self, seq: int, m: StoredMessage) -> bytes:
        """Where the message is stored, and its ready index key."""
        return row_key(seq, m.priority, group_path(m.group) if self.fair else None)

    def _index_key(self, seq: int, m: StoredMessage) -> bytes:
        if m.state == READY:
            return self.row_key(seq, m)
        if m.state == DELAYED:
            return time_key(m.available_ms, seq)
        if m.state == IN_FLIGHT:
            return time_key(m.deadline_ms, seq)
        return seq_key(seq)

    def add(self, seq: int, m: StoredMessage) -> None:
        """A new message: its locator, its row and its index entry."""
        self.txn.put(LOCATORS, seq_key(seq), self.row_key(seq, m))
        self.enter(seq, m)

    def enter(self, seq: int, m: StoredMessage) -> None:
        """Write the message and index it under its state."""
        txn = self.txn
        if m.state == IN_FLIGHT:
            self.add_in_flight(m.deadline_ms, [seq])
        else:
            value = ready_value(m.enqueued_ms, m.group) if m.state == READY else b""
            txn.put(INDEX_OF[m.state], self._index_key(seq, m), value)
        txn.put(MESSAGES, self.row_key(seq, m), encode_message(m))
        self._count(m.group, m.state, 1)

    def leave(self, seq: int, m: StoredMessage) -> None:
        """Un-index the message from its state (its row stays; the in-flight index is cleaned lazily)."""
        if m.state != IN_FLIGHT:
            self.txn.delete(INDEX_OF[m.state], self._index_key(seq, m))
        self._count(m.group, m.state, -1)

    def add_in_flight(self, deadline_ms: int, seqs: list[int]) -> None:
        """Index leases ending at deadline_ms under one entry (merged with an entry of the same key)."""
        self.add_in_flight_keys(deadline_ms, [SEQ.pack(seq) for seq in seqs])

    def add_in_flight_keys(self, deadline_ms: int, seq_keys: list[bytes]) -> None:
        """add_in_flight by seq keys (an entry's value is the seq keys back to back)."""
        self.add_in_flight_packed(deadline_ms, b"".join(seq_keys))

    def add_in_flight_packed(self, deadline_ms: int, packed: bytes) -> None:
        """add_in_flight of seq keys packed back to back."""
        key = time_key(deadline_ms, SEQ.unpack_from(packed)[0])
        old = self.txn.get(IN_FLIGHT_T, key)
        self.txn.put(IN_FLIGHT_T, key, packed if old is None else bytes(old) + packed)

    def move(self, seq: int, m: StoredMessage, **changes) -> StoredMessage:
        moved = m._replace(**changes)
        self.leave(seq, m)
        self._relocate(seq, m, moved)
        self.enter(seq, moved)
        return moved

    def rewrite(self, seq: int, m: StoredMessage, changed: StoredMessage) -> None:
        """Store changed fields of a message whose indexes do not depend on them."""
        self._relocate(seq, m, changed)
        self.txn.put(MESSAGES, self.row_key(seq, changed), encode_message(changed))

    def _relocate(self, seq: int, m: StoredMessage, changed: StoredMessage) -> None:
        """A new priority moves the row to its new row key."""
        old_key, new_key = self.row_key(seq, m), self.row_key(seq, changed)
        if new_key != old_key:
            self.txn.delete(MESSAGES, old_key)
            self.txn.put(LOCATORS, seq_key(seq), new_key)

    def remove(self, seq: int, m: StoredMessage) -> None:
        self.leave(seq, m)
        self.txn.delete(MESSAGES, self.row_key(seq, m))
        self.txn.delete(LOCATORS, seq_key(seq))

    def retry(self, seq: int, m: StoredMessage, delay_ms: int, reason: bytes) -> StoredMessage:
        """Back to ready (after delay_ms, or the backoff) — or dead once the deliveries reached the maximum."""
        p = self.policy
        error = reason or m.last_error
        if p.max_deliveries and m.delivery_count >= p.max_deliveries:
            return self.move(seq, m, state=DEAD, deadline_ms=0, last_error=error)
        if delay_ms == queue_commands.BACKOFF:
            delay_ms = retry_delay_ms(seq, m.delivery_count, p.backoff_base_ms, p.backoff_max_ms)
        state = DELAYED if delay_ms > 0 else READY
        return self.move(seq, m, state=state, available_ms=self.now + max(delay_ms, 0), deadline_ms=0,
                         last_error=error)

    # ------------------------------------------------------------------ counters and fair leaves
    def _group(self, group: bytes) -> list[int]:
        counts = self._groups.get(group)
        if counts is None:
            raw = self.txn.get(GROUPS, b"g" + group)
            counts = self._groups[group] = [0, *(GROUP.unpack(raw) if raw is not None else (0, 0, 0, 0))]
        return counts

    def count_moves(self, groups: list[bytes], old_state: int, new_state: int) -> None:
        """Count messages of `groups` (one entry per message) leaving old_state for new_state; NO_STATE as the
        old one counts new messages, as the new one removed messages (slot 0 of the counters absorbs it)."""
        moved = len(groups)
        if not moved:
            return
        counts = self.counts
        counts[old_state] -= moved
        counts[new_state] += moved
        for group, n in Counter(groups).items():
            group_counts = self._group(group)
            group_counts[old_state] -= n
            group_counts[new_state] += n
            if self.fair and (old_state in (READY, IN_FLIGHT) or new_state in (READY, IN_FLIGHT)):
                self._sync_leaf(group, group_counts)

    def count_moves_n(self, group: bytes, moved: int, old_state: int, new_state: int) -> None:
        """count_moves of `moved` messages of one group."""
        if not moved:
            return
        counts = self.counts
        counts[old_state] -= moved
        counts[new_state] += moved
        group_counts = self._group(group)
        group_counts[old_state] -= moved
        group_counts[new_state] += moved
        if self.fair and (old_state in (READY, IN_FLIGHT) or new_state in (READY, IN_FLIGHT)):
            self._sync_leaf(group, group_counts)

    def _count(self, group: bytes, state: int, delta: int) -> None:
        self.counts[state] += delta
        counts = self._group(group)
        counts[state] += delta
        if self.fair and state in (READY, IN_FLIGHT):
            self._sync_leaf(group, counts)

    def _sync_leaf(self, group: bytes, counts: list[int]) -> None:
        """Keep `leaves` = the groups with ready messages and room under max_in_flight_per_group."""
        limit = self.policy.max_in_flight_per_group
        wanted = counts[READY] > 0 and (limit == 0 or counts[IN_FLIGHT] < limit)
        present = self._leaves.get(group)
        path = group_path(group)
        if present is None:
            present = self.txn.get(LEAVES, path) is not None
        if wanted and not present:
            self.txn.put(LEAVES, path, b"")
        elif present and not wanted:
            self.txn.delete(LEAVES, path)
            self.rotation.leaf_removed(path)
        self._leaves[group] = wanted

    # ------------------------------------------------------------------ due work
    def _due_keys(self, table: str, time_of_key, budget: int, until_ms: int | None = None,
                  start: bytes | None = None) -> list[bytes]:
        due, until = [], self.now if until_ms is None else until_ms
        for key, _ in self.txn.items(table, start):
            if len(due) >= budget or time_of_key(key) > until:
                break
            due.append(bytes(key))
        return due

    def _expired_lease_keys(self, budget: int) -> list[bytes]:
        """The in-flight index entries due now, but those a new leader's grace keeps."""
        if self.kept_leases is None:
            return self._due_keys(IN_FLIGHT_T, time_of, budget)
        after, until = self.kept_leases
        keys = self._due_keys(IN_FLIGHT_T, time_of, budget, min(after, self.now))
        if len(keys) < budget and self.now > until:
            keys += self._due_keys(IN_FLIGHT_T, time_of, budget - len(keys), start=time_key(until + 1))
        return keys

    def advance(self) -> None:
        """The due work, before the command itself: leases past their deadline expire (but those a new leader's
        grace keeps: broker/clock.py), delayed messages come due, idempotency keys, producers and settlers past
        their time are forgotten."""
        budget = self.policy.due_per_command_max
        expired = 0
        for key in self._expired_lease_keys(budget):
            if expired >= budget:
                break
            value = bytes(self.txn.get(IN_FLIGHT_T, key))
            if self.runs.any:
                self.open_runs_in_flight(time_of(key), value)
            entry = in_flight_entry(self.txn, key, value, rows_only=True)  # its runs opened just above
            self.txn.delete(IN_FLIGHT_T, key)
            for seq, m in entry:
                self.retry(seq, m, queue_commands.BACKOFF, LEASE_EXPIRED)
            expired += len(entry)
        for key in self._due_keys(DELAYED_T, time_of, budget):
            seq = seq_of(key)
            self.move(seq, self.message(seq), state=READY, available_ms=self.now)
        for key in self._due_keys(IDEMPOTENCY_EXPIRY, time8_of, budget):
            self._expire(IDEMPOTENCY, IDEMPOTENCY_EXPIRY, key, lambda raw: IDEMPOTENCY_VALUE.unpack(raw)[1])
        for key in self._due_keys(PRODUCER_EXPIRY, time8_of, budget):
            self._expire(PRODUCERS, PRODUCER_EXPIRY, key, lambda raw: EXPIRES.unpack_from(raw)[0])
        for key in self._due_keys(SETTLER_EXPIRY, time8_of, budget):
            self._expire(SETTLERS, SETTLER_EXPIRY, key, lambda raw: EXPIRES.unpack_from(raw)[0])

    def _expire(self, table: str, expiry_table: str, expiry_key: bytes, expires_of) -> None:
        """Forget the entry an expiry key points at, unless it was renewed since."""
        key = expiry_key[8:]
        raw = self.txn.get(table, key)
        if raw is not None and expires_of(raw) == time8_of(expiry_key):
            self.txn.delete(table, key)
        self.txn.delete(expiry_table, expiry_key)

    # ------------------------------------------------------------------ end of the command
    def finish(self, index: int) -> tuple[QueueState, Due]:
        for group, counts in self._groups.items():
            if any(counts[1:]):
                self.txn.put(GROUPS, b"g" + group, GROUP.pack(*counts[1:]))
            else:
                self.txn.delete(GROUPS, b"g" + group)
        if self.rotation is not None:
            self.rotation.flush()
        c = self.counts
        state = QueueState(index, self.now, self.next_seq, c[READY], c[DELAYED], c[IN_FLIGHT], c[DEAD])
        self.txn.put(META, STATE_KEY, STATE.pack(*state))
        return state, due_in(self.txn, state.ready, self.fair)


