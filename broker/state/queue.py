"""The queue partition's state machine: enqueue, lease, ack, nack, extend, delete, reschedule, dead-letter.

Pure and deterministic: time and the topic's policy arrive inside every command (stamped by the leader) and
storage is reached only through the Store seam. Each command first does the partition's due work (expired
leases go back to ready after a backoff or are marked dead, due delayed messages become ready, expired
idempotency keys and idle producers are forgotten), then its own work, and writes all of it with the applied
Raft index in one transaction. A refused command writes nothing but the applied index and returns a typed
error value; per-message refusals inside a batch (an ack from a lost lease) are error values in the result list.
Time never goes backwards: a command stamped earlier than the last one (a new leader's clock) uses the last.

Tables (layouts in queue_records and queue_fair):
    meta                b"state" -> _QueueState
    messages            seq -> stored message
    ready               delivery order -> enqueued_ms >q | group  (priority: priority|seq; fair: path|priority|seq)
    delayed             time|seq -> b""
    in_flight           deadline|first seq -> the seqs leased with that deadline (>Q each). Kept lazily: an ack
                        or delete does not touch it; an entry is dropped at its deadline, when each seq still in
                        flight with that deadline expires (one write per lease batch instead of two per message)
    dead                seq -> b"" (marked dead; the dead-letter mover copies them out, then removes them)
    groups              b"g" + group -> ready, delayed, in_flight, dead (>IIII)
    leaves, cursors     fair ordering: groups that can be delivered from now, and rotation cursors
    idempotency         key -> seq >Q | expires_ms >q;   idempotency_expiry  time|key -> b""
    producers           producer_id -> expires_ms >q | remembered batches;   producer_expiry  time|producer_id -> b""
    settlers            settler_id -> expires_ms >q | sequence >q | count >I | failures (index >I, code >B)
                        (the answer to a consumer's last ack/nack batch, for its retry); settler_expiry likewise
"""
from __future__ import annotations

import itertools
import struct
from typing import NamedTuple

from raftbus.client import errors

from .. import queue_commands as qc
from .queue_backoff import retry_delay_ms
from .queue_fair import FairRotation, group_path
from .queue_records import (
    DEAD,
    DELAYED,
    IN_FLIGHT,
    READY,
    StoredMessage,
    decode_message,
    encode_message,
    leased_copy,
    priority_key,
    read_head,
    read_ready_value,
    ready_value,
    seq_key,
    seq_of,
    time_key,
    time_of,
)

META, MESSAGES, READY_T, DELAYED_T, IN_FLIGHT_T, DEAD_T = (
    "meta", "messages", "ready", "delayed", "in_flight", "dead")
GROUPS, LEAVES, CURSORS = "groups", "leaves", "cursors"
IDEMPOTENCY, IDEMPOTENCY_EXPIRY, PRODUCERS, PRODUCER_EXPIRY = (
    "idempotency", "idempotency_expiry", "producers", "producer_expiry")
SETTLERS, SETTLER_EXPIRY = "settlers", "settler_expiry"
STATE_KEY = b"state"
PRODUCER_BATCHES_MAX = 5
MOVE_KEY_PREFIX = b"\x01"  # idempotency keys of dead-letter moves and redrives (user keys are printable)
LEASE_EXPIRED = b"lease expired"

_STATE = struct.Struct(">qqQQQQQ")
_GROUP = struct.Struct(">IIII")
_IDEMPOTENCY = struct.Struct(">Qq")
_TIME = struct.Struct(">Q")
_EXPIRES = struct.Struct(">q")
_SEQ = struct.Struct(">Q")
_BATCH = struct.Struct(">qIQI")       # base_sequence, count, first new seq, duplicates
_DUPLICATE = struct.Struct(">IQ")     # index in the batch, seq it duplicated
_BLOB_LEN = struct.Struct(">I")
_SETTLED = struct.Struct(">qqI")      # expires_ms, sequence, count
_FAILURE = struct.Struct(">IB")       # index in the batch, refusal code
_REFUSALS = {1: errors.UnknownMessage, 2: errors.LeaseLost}
_REFUSAL_CODES = {cls: code for code, cls in _REFUSALS.items()}
_INDEX_OF = {READY: READY_T, DELAYED: DELAYED_T, IN_FLIGHT: IN_FLIGHT_T, DEAD: DEAD_T}


class _QueueState(NamedTuple):
    applied_index: int = 0
    now_ms: int = -(2**62)
    next_seq: int = 1
    ready: int = 0
    delayed: int = 0
    in_flight: int = 0
    dead: int = 0


class _Due(NamedTuple):
    next_due_ms: int | None = None   # earliest lease deadline or delayed delivery time
    deliverable: bool = False        # a lease now would find a message


class Enqueued(NamedTuple):
    seq: int
    duplicate: bool


class EnqueueResult(NamedTuple):
    enqueued_ms: int
    messages: tuple[Enqueued, ...]


class Leased(NamedTuple):
    """A leased message as stored (decoded only where it is needed: on the leader that answers)."""

    seq: int
    raw: bytes

    @property
    def message(self) -> StoredMessage:
        return decode_message(self.raw)


class GroupStats(NamedTuple):
    group: bytes
    ready: int
    delayed: int
    in_flight: int
    dead: int
    oldest_ready_enqueued_ms: int | None


class PartitionStats(NamedTuple):
    ready: int
    delayed: int
    in_flight: int
    dead: int
    oldest_ready_enqueued_ms: int | None
    next_due_ms: int | None
    enqueued_total: int
    groups: tuple[GroupStats, ...]
    groups_truncated: bool


class _Refused(Exception):
    def __init__(self, error: errors.RaftbusError):
        self.error = error


def _time8(time_ms: int) -> bytes:
    return _TIME.pack(time_ms + 2**63)


def _time8_of(key: bytes) -> int:
    return _TIME.unpack_from(key)[0] - 2**63


class QueueStateMachine:
    TABLES = (META, MESSAGES, READY_T, DELAYED_T, IN_FLIGHT_T, DEAD_T, GROUPS, LEAVES, CURSORS,
              IDEMPOTENCY, IDEMPOTENCY_EXPIRY, PRODUCERS, PRODUCER_EXPIRY, SETTLERS, SETTLER_EXPIRY)

    def __init__(self, store, ordering: str = "priority"):
        self._store = store
        self._fair = ordering == "fair"
        self._state = _QueueState()
        self._due = _Due()
        self.reload()

    # ------------------------------------------------------------------ apply (the Raft thread)
    def apply(self, index: int, command: bytes):
        """Apply one committed command; returns a result or a typed error value, never raises."""
        if index <= self._state.applied_index:
            return None
        try:
            try:
                cmd = qc.decode(command)
            except errors.RaftbusError as exc:
                return self._refuse(index, exc)
            now_ms = max(cmd.now_ms, self._state.now_ms)
            with self._store.write() as txn:
                work = _Work(txn, self._state, now_ms, cmd.policy, self._fair)
                work.advance()
                result = _HANDLERS[cmd.op](work, cmd.body)
                if isinstance(result, errors.RaftbusError):
                    raise _Refused(result)
                state, due = work.finish(index)
            self._state, self._due = state, due
            return result
        except _Refused as refused:
            return self._refuse(index, refused.error)
        except Exception as exc:  # nothing of the command was committed
            return errors.InternalError(f"queue command {index} failed: {type(exc).__name__}: {exc}")

    def _refuse(self, index: int, error: errors.RaftbusError):
        """Record only the applied index; the command changes nothing else."""
        state = self._state._replace(applied_index=index)
        with self._store.write() as txn:
            txn.put(META, STATE_KEY, _STATE.pack(*state))
        self._state = state
        return error

    # ------------------------------------------------------------------ reads (any thread)
    def applied_index(self) -> int:
        return self._state.applied_index

    def counts(self) -> tuple[int, int, int, int]:
        """(ready, delayed, in_flight, dead) as of the last applied command."""
        s = self._state
        return s.ready, s.delayed, s.in_flight, s.dead

    def next_due_ms(self) -> int | None:
        return self._due.next_due_ms

    def deliverable(self) -> bool:
        return self._due.deliverable

    def last_now_ms(self) -> int:
        return self._state.now_ms

    def get(self, seq: int) -> StoredMessage | None:
        with self._store.read() as txn:
            raw = txn.get(MESSAGES, seq_key(seq))
        return None if raw is None else decode_message(raw)

    def leases_held(self, leases) -> set[int]:
        """The seqs among (seq, delivery_count) pairs whose lease still holds."""
        held = set()
        with self._store.read() as txn:
            for seq, delivery_count in leases:
                raw = txn.get(MESSAGES, seq_key(seq))
                if raw is not None:
                    m = decode_message(raw)
                    if m.state == IN_FLIGHT and m.delivery_count == delivery_count:
                        held.add(seq)
        return held

    def peek(self, state: int, max_messages: int) -> list[tuple[int, StoredMessage]]:
        """Up to max_messages messages in `state`, in that index's order (delivery order for ready ones)."""
        with self._store.read() as txn:
            if state == IN_FLIGHT:
                return _peek_in_flight(txn, max_messages)
            keys = [bytes(k) for k, _ in itertools.islice(txn.items(_INDEX_OF[state]), max_messages)]
            found = [(seq_of(k), txn.get(MESSAGES, seq_key(seq_of(k)))) for k in keys]
        return [(seq, decode_message(raw)) for seq, raw in found if raw is not None]

    def stats(self, groups_max: int, scan_max: int) -> PartitionStats:
        """Counts, the oldest ready message and per-group counts. The oldest ready message is found by visiting
        the first message of each (group,) priority bucket, at most scan_max of them; a group's oldest in a
        priority-ordered partition by scanning up to scan_max ready messages (None for groups beyond that)."""
        with self._store.read() as txn:
            s = _state_in(txn)
            oldest = _oldest_in_buckets(txn, b"", scan_max)
            rows = list(itertools.islice(txn.items(GROUPS), groups_max + 1))
            truncated = len(rows) > groups_max
            groups = [(bytes(k[1:]), _GROUP.unpack(v)) for k, v in rows[:groups_max]]
            wanted = {g for g, c in groups if c[0]}
            if self._fair:
                firsts = {g: _oldest_in_buckets(txn, group_path(g), scan_max) for g in wanted}
            else:
                firsts = _oldest_per_group(txn, wanted, scan_max)
        group_stats = tuple(GroupStats(g, *c, firsts.get(g)) for g, c in groups)
        return PartitionStats(s.ready, s.delayed, s.in_flight, s.dead, oldest, self._due.next_due_ms,
                              s.next_seq - 1, group_stats, truncated)

    def reload(self) -> None:
        """Re-read the published state from the store (after a snapshot restore)."""
        with self._store.read() as txn:
            state = _state_in(txn)
            self._due = _due_in(txn, state.ready, self._fair)
        self._state = state


def _state_in(txn) -> _QueueState:
    raw = txn.get(META, STATE_KEY)
    return _QueueState() if raw is None else _QueueState(*_STATE.unpack(raw))


def _due_in(txn, ready: int, fair: bool) -> _Due:
    times = [time_of(bytes(found[0])) for found in (txn.first(DELAYED_T), txn.first(IN_FLIGHT_T)) if found]
    deliverable = txn.first(LEAVES) is not None if fair else ready > 0
    return _Due(min(times) if times else None, deliverable)


def _in_flight_entry(txn, key, value) -> list[tuple[int, StoredMessage]]:
    """The messages of an in-flight index entry that are still in flight under that deadline."""
    deadline = time_of(key)
    live = []
    for (seq,) in _SEQ.iter_unpack(value):
        raw = txn.get(MESSAGES, seq_key(seq))
        if raw is not None:
            m = decode_message(raw)
            if m.state == IN_FLIGHT and m.deadline_ms == deadline:
                live.append((seq, m))
    return live


def _peek_in_flight(txn, max_messages: int) -> list[tuple[int, StoredMessage]]:
    found: list[tuple[int, StoredMessage]] = []
    for key, value in txn.items(IN_FLIGHT_T):
        found += _in_flight_entry(txn, bytes(key), bytes(value))
        if len(found) >= max_messages:
            break
    return found[:max_messages]


def _oldest_in_buckets(txn, prefix: bytes, buckets_max: int) -> int | None:
    """The earliest enqueue time among ready messages under `prefix`: within a bucket (same group path and
    priority) arrival order is seq order, so each bucket's first message is its oldest; jump bucket to bucket."""
    oldest, start = None, prefix
    for _ in range(buckets_max):
        found = next(txn.items(READY_T, start or None), None)
        if found is None or not bytes(found[0]).startswith(prefix):
            break
        key = bytes(found[0])
        enqueued_ms, _ = read_ready_value(found[1])
        oldest = enqueued_ms if oldest is None else min(oldest, enqueued_ms)
        start = key[:-8] + b"\xff" * 9
    return oldest


def _oldest_per_group(txn, wanted: set[bytes], scan_max: int) -> dict[bytes, int]:
    oldest: dict[bytes, int] = {}
    if not wanted:
        return oldest
    for _, value in itertools.islice(txn.items(READY_T), scan_max):
        enqueued_ms, group = read_ready_value(value)
        if group in wanted and enqueued_ms < oldest.get(group, enqueued_ms + 1):
            oldest[group] = enqueued_ms
    return oldest


class _Work:
    """One command's changes over its write transaction: index moves, counters and caches flushed at the end."""

    def __init__(self, txn, state: _QueueState, now_ms: int, policy: qc.QueuePolicy, fair: bool):
        self.txn = txn
        self.state = state
        self.now = now_ms
        self.policy = policy
        self.fair = fair
        self.counts = [0, state.ready, state.delayed, state.in_flight, state.dead]
        self.next_seq = state.next_seq
        self._groups: dict[bytes, list[int]] = {}
        self._leaves: dict[bytes, bool] = {}
        self.rotation = FairRotation(txn, LEAVES, CURSORS) if fair else None

    # ------------------------------------------------------------------ messages and indexes
    def message(self, seq: int) -> StoredMessage | None:
        raw = self.txn.get(MESSAGES, seq_key(seq))
        return None if raw is None else decode_message(raw)

    def _index_key(self, seq: int, m: StoredMessage) -> bytes:
        if m.state == READY:
            key = priority_key(m.priority, seq)
            return group_path(m.group) + key if self.fair else key
        if m.state == DELAYED:
            return time_key(m.available_ms, seq)
        if m.state == IN_FLIGHT:
            return time_key(m.deadline_ms, seq)
        return seq_key(seq)

    def enter(self, seq: int, m: StoredMessage) -> None:
        """Write the message and index it under its state."""
        txn = self.txn
        if m.state == IN_FLIGHT:
            self.add_in_flight(m.deadline_ms, [seq])
        else:
            value = ready_value(m.enqueued_ms, m.group) if m.state == READY else b""
            txn.put(_INDEX_OF[m.state], self._index_key(seq, m), value)
        txn.put(MESSAGES, seq_key(seq), encode_message(m))
        self._count(m.group, m.state, 1)

    def leave(self, seq: int, m: StoredMessage) -> None:
        """Un-index the message from its state (its row stays; the in-flight index is cleaned lazily)."""
        if m.state != IN_FLIGHT:
            self.txn.delete(_INDEX_OF[m.state], self._index_key(seq, m))
        self._count(m.group, m.state, -1)

    def add_in_flight(self, deadline_ms: int, seqs: list[int]) -> None:
        """Index leases ending at deadline_ms under one entry (merged with an entry of the same key)."""
        key = time_key(deadline_ms, seqs[0])
        old = self.txn.get(IN_FLIGHT_T, key)
        packed = b"".join(_SEQ.pack(seq) for seq in seqs)
        self.txn.put(IN_FLIGHT_T, key, packed if old is None else bytes(old) + packed)

    def move(self, seq: int, m: StoredMessage, **changes) -> StoredMessage:
        moved = m._replace(**changes)
        self.leave(seq, m)
        self.enter(seq, moved)
        return moved

    def remove(self, seq: int, m: StoredMessage) -> None:
        self.leave(seq, m)
        self.txn.delete(MESSAGES, seq_key(seq))

    def retry(self, seq: int, m: StoredMessage, delay_ms: int, reason: bytes) -> StoredMessage:
        """Back to ready (after delay_ms, or the backoff) — or dead once the deliveries reached the maximum."""
        p = self.policy
        error = reason or m.last_error
        if p.max_deliveries and m.delivery_count >= p.max_deliveries:
            return self.move(seq, m, state=DEAD, deadline_ms=0, last_error=error)
        if delay_ms == qc.BACKOFF:
            delay_ms = retry_delay_ms(seq, m.delivery_count, p.backoff_base_ms, p.backoff_max_ms)
        state = DELAYED if delay_ms > 0 else READY
        return self.move(seq, m, state=state, available_ms=self.now + max(delay_ms, 0), deadline_ms=0,
                         last_error=error)

    # ------------------------------------------------------------------ counters and fair leaves
    def _group(self, group: bytes) -> list[int]:
        counts = self._groups.get(group)
        if counts is None:
            raw = self.txn.get(GROUPS, b"g" + group)
            counts = self._groups[group] = [0, *(_GROUP.unpack(raw) if raw is not None else (0, 0, 0, 0))]
        return counts

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
    def _due_keys(self, table: str, time_of_key, budget: int) -> list[bytes]:
        due = []
        for key, _ in self.txn.items(table):
            if len(due) >= budget or time_of_key(key) > self.now:
                break
            due.append(bytes(key))
        return due

    def advance(self) -> None:
        budget = self.policy.due_per_command_max
        expired = 0
        for key in self._due_keys(IN_FLIGHT_T, time_of, budget):
            if expired >= budget:
                break
            entry = _in_flight_entry(self.txn, key, bytes(self.txn.get(IN_FLIGHT_T, key)))
            self.txn.delete(IN_FLIGHT_T, key)
            for seq, m in entry:
                self.retry(seq, m, qc.BACKOFF, LEASE_EXPIRED)
            expired += len(entry)
        for key in self._due_keys(DELAYED_T, time_of, budget):
            seq = seq_of(key)
            self.move(seq, self.message(seq), state=READY, available_ms=self.now)
        for key in self._due_keys(IDEMPOTENCY_EXPIRY, _time8_of, budget):
            self._expire(IDEMPOTENCY, IDEMPOTENCY_EXPIRY, key, lambda raw: _IDEMPOTENCY.unpack(raw)[1])
        for key in self._due_keys(PRODUCER_EXPIRY, _time8_of, budget):
            self._expire(PRODUCERS, PRODUCER_EXPIRY, key, lambda raw: _EXPIRES.unpack_from(raw)[0])
        for key in self._due_keys(SETTLER_EXPIRY, _time8_of, budget):
            self._expire(SETTLERS, SETTLER_EXPIRY, key, lambda raw: _EXPIRES.unpack_from(raw)[0])

    def _expire(self, table: str, expiry_table: str, expiry_key: bytes, expires_of) -> None:
        """Forget the entry an expiry key points at, unless it was renewed since."""
        key = expiry_key[_TIME.size:]
        raw = self.txn.get(table, key)
        if raw is not None and expires_of(raw) == _time8_of(expiry_key):
            self.txn.delete(table, key)
        self.txn.delete(expiry_table, expiry_key)

    # ------------------------------------------------------------------ commands
    def enqueue(self, body: qc.Enqueue):
        remembered = ()
        if body.producer_id:
            remembered = _load_batches(self.txn.get(PRODUCERS, body.producer_id))
            verdict = _check_sequence(remembered, body)
            if verdict is not None:
                return verdict if isinstance(verdict, errors.RaftbusError) else EnqueueResult(self.now, verdict)
        first_seq = self.next_seq
        results = tuple(self._enqueue_one(item) for item in body.items)
        if body.producer_id:
            self._remember(body, remembered, first_seq, results)
        return EnqueueResult(self.now, results)

    def _enqueue_one(self, item: qc.EnqueueItem) -> Enqueued:
        now = self.now
        key = MOVE_KEY_PREFIX + seq_key(item.origin_id) if item.origin_id else item.idempotency_key
        if key:
            raw = self.txn.get(IDEMPOTENCY, key)
            if raw is not None:
                seq, expires = _IDEMPOTENCY.unpack(raw)
                if expires > now:
                    return Enqueued(seq, True)
        seq = self.next_seq
        self.next_seq += 1
        delayed = item.deliver_at_ms > now
        self.enter(seq, StoredMessage(
            DELAYED if delayed else READY, item.priority, item.delivery_count, item.enqueued_ms or now,
            item.deliver_at_ms if delayed else now, 0, item.origin_id, item.group, item.idempotency_key,
            item.last_error, item.record))
        window = self.policy.idempotency_window_ms
        if key and window > 0:
            expires = now + window
            self.txn.put(IDEMPOTENCY, key, _IDEMPOTENCY.pack(seq, expires))
            self.txn.put(IDEMPOTENCY_EXPIRY, _time8(expires) + key, b"")
        return Enqueued(seq, False)

    def _remember(self, body: qc.Enqueue, remembered, first_seq: int, results) -> None:
        duplicates = [(i, r.seq) for i, r in enumerate(results) if r.duplicate]
        batch = _BATCH.pack(body.base_sequence, len(results), first_seq, len(duplicates)) + b"".join(
            _DUPLICATE.pack(*d) for d in duplicates)
        kept = (list(remembered) + [batch])[-PRODUCER_BATCHES_MAX:]
        old = self.txn.get(PRODUCERS, body.producer_id)
        if old is not None:
            self.txn.delete(PRODUCER_EXPIRY, _time8(_EXPIRES.unpack_from(old)[0]) + body.producer_id)
        expires = self.now + self.policy.producer_idle_ms
        self.txn.put(PRODUCERS, body.producer_id, _EXPIRES.pack(expires) + b"".join(
            _BLOB_LEN.pack(len(b)) + b for b in kept))
        self.txn.put(PRODUCER_EXPIRY, _time8(expires) + body.producer_id, b"")

    def lease(self, body: qc.Lease) -> list[Leased]:
        """The hot path: the ready index key is known, the message header is patched in place."""
        txn = self.txn
        deadline = self.now + body.visibility_ms
        leased: list[Leased] = []
        size = 0
        for key in self._next_ready(body.max_messages):
            seq = seq_of(key)
            message_key = seq_key(seq)
            raw = txn.get(MESSAGES, message_key)
            head = read_head(raw)
            if leased and size + head.record_bytes > body.max_bytes:
                break
            size += head.record_bytes
            copy = leased_copy(raw, head, deadline)
            txn.delete(READY_T, key)
            txn.put(MESSAGES, message_key, copy)
            self._count(head.group, READY, -1)
            self._count(head.group, IN_FLIGHT, 1)
            leased.append(Leased(seq, copy))
        if leased:
            self.add_in_flight(deadline, [one.seq for one in leased])
        return leased

    def _next_ready(self, max_messages: int):
        """Ready index keys in delivery order; the caller leases each before asking for the next (fair picks
        depend on it)."""
        if not self.fair:
            yield from [bytes(k) for k, _ in itertools.islice(self.txn.items(READY_T), max_messages)]
            return
        for _ in range(max_messages):
            path = self.rotation.pick()
            if path is None:
                return
            yield bytes(next(self.txn.items(READY_T, path))[0])

    def _check_lease(self, seq: int, m: StoredMessage | None, delivery_count: int):
        if m is None:
            return errors.UnknownMessage("no such message (acked, deleted, dead-lettered or never enqueued)")
        if m.state != IN_FLIGHT or m.delivery_count != delivery_count:
            return errors.LeaseLost(f"the lease of delivery {delivery_count} no longer holds: the message is "
                                    f"{m.state_name} at delivery {m.delivery_count}")
        return None

    def ack(self, body: qc.Settle) -> list:
        return self._settle(body, self._ack_one)

    def nack(self, body: qc.Settle) -> list:
        return self._settle(body, self._nack_one)

    def _ack_one(self, lease):
        """The hot path: only the message header is read."""
        seq, delivery_count = lease
        message_key = seq_key(seq)
        raw = self.txn.get(MESSAGES, message_key)
        if raw is None:
            return self._check_lease(seq, None, delivery_count)
        head = read_head(raw)
        if head.state != IN_FLIGHT or head.delivery_count != delivery_count:
            return self._check_lease(seq, decode_message(raw), delivery_count)
        self.txn.delete(MESSAGES, message_key)
        self._count(head.group, IN_FLIGHT, -1)
        return None

    def _nack_one(self, nack: qc.Nack):
        m = self.message(nack.seq)
        refusal = self._check_lease(nack.seq, m, nack.delivery_count)
        if refusal is None:
            self.retry(nack.seq, m, nack.delay_ms, nack.reason)
        return refusal

    def _settle(self, body: qc.Settle, one) -> list:
        """Per item: None or a refusal. A retry of the settler's last batch gets that batch's answers again."""
        old = self.txn.get(SETTLERS, body.settler_id) if body.settler_id else None
        if old is not None:
            _, sequence, count = _SETTLED.unpack_from(old)
            if sequence == body.sequence and count == len(body.items):
                return _replayed_answers(bytes(old), count)
        results = [one(item) for item in body.items]
        if body.settler_id:
            if old is not None:
                self.txn.delete(SETTLER_EXPIRY, _time8(_EXPIRES.unpack_from(old)[0]) + body.settler_id)
            expires = self.now + self.policy.producer_idle_ms
            failures = b"".join(_FAILURE.pack(i, _REFUSAL_CODES[type(r)]) for i, r in enumerate(results) if r)
            self.txn.put(SETTLERS, body.settler_id, _SETTLED.pack(expires, body.sequence, len(results)) + failures)
            self.txn.put(SETTLER_EXPIRY, _time8(expires) + body.settler_id, b"")
        return results

    def extend(self, extensions) -> list:
        results = []
        for seq, delivery_count, visibility_ms in extensions:
            m = self.message(seq)
            refusal = self._check_lease(seq, m, delivery_count)
            if refusal is None:
                refusal = self.move(seq, m, deadline_ms=self.now + visibility_ms).deadline_ms
            results.append(refusal)
        return results

    def delete(self, seqs) -> list:
        results = []
        for seq in seqs:
            m = self.message(seq)
            if m is None:
                results.append(errors.UnknownMessage("no such message (acked, deleted, dead-lettered or never "
                                                     "enqueued)"))
                continue
            self.remove(seq, m)
            results.append(None)
        return results

    def dead_remove(self, seqs) -> int:
        removed = 0
        for seq in seqs:
            m = self.message(seq)
            if m is not None and m.state == DEAD:
                self.remove(seq, m)
                removed += 1
        return removed

    def change(self, change: qc.Change):
        seq = change.seq
        m = self.message(seq)
        if m is None:
            return errors.UnknownMessage("no such message (acked, deleted, dead-lettered or never enqueued)")
        changes = {} if change.priority is None else {"priority": change.priority}
        if change.deliver_at_ms is not None:
            if m.state not in (READY, DELAYED):
                return errors.MessageNotWaiting(f"the message is {m.state_name}; only a ready or delayed message "
                                                "can be rescheduled")
            later = change.deliver_at_ms > self.now
            changes["state"] = DELAYED if later else READY
            changes["available_ms"] = change.deliver_at_ms if later else self.now
        if m.state in (READY, DELAYED):
            return self.move(seq, m, **changes)
        changed = m._replace(**changes)  # leased or dead: its index does not depend on the priority
        self.txn.put(MESSAGES, seq_key(seq), encode_message(changed))
        return changed

    def tick(self, _body) -> None:
        return None

    # ------------------------------------------------------------------ end of the command
    def finish(self, index: int) -> tuple[_QueueState, _Due]:
        for group, counts in self._groups.items():
            if any(counts[1:]):
                self.txn.put(GROUPS, b"g" + group, _GROUP.pack(*counts[1:]))
            else:
                self.txn.delete(GROUPS, b"g" + group)
        if self.rotation is not None:
            self.rotation.flush()
        c = self.counts
        state = _QueueState(index, self.now, self.next_seq, c[READY], c[DELAYED], c[IN_FLIGHT], c[DEAD])
        self.txn.put(META, STATE_KEY, _STATE.pack(*state))
        return state, _due_in(self.txn, state.ready, self.fair)


_HANDLERS = {
    qc.ENQUEUE: _Work.enqueue,
    qc.LEASE: _Work.lease,
    qc.ACK: _Work.ack,
    qc.NACK: _Work.nack,
    qc.EXTEND: _Work.extend,
    qc.DELETE: _Work.delete,
    qc.DEAD_REMOVE: _Work.dead_remove,
    qc.CHANGE: _Work.change,
    qc.TICK: _Work.tick,
}


# ---------------------------------------------------------------------- producer retries
def _load_batches(raw) -> list[bytes]:
    """The remembered batch records of a producer (newest last)."""
    if raw is None:
        return []
    raw = bytes(raw)
    batches, position = [], _EXPIRES.size
    while position < len(raw):
        (length,) = _BLOB_LEN.unpack_from(raw, position)
        position += _BLOB_LEN.size
        batches.append(raw[position:position + length])
        position += length
    return batches


def _check_sequence(remembered: list[bytes], body: qc.Enqueue):
    """None to enqueue; the original results of a retried batch; OutOfOrderSequence for a gap or an old one."""
    if not remembered:
        return None
    for batch in remembered:
        base_sequence, count, first_seq, duplicates = _BATCH.unpack_from(batch)
        if base_sequence == body.base_sequence and count == len(body.items):
            return _replayed(batch, count, first_seq, duplicates)
    base_sequence, count, _, _ = _BATCH.unpack_from(remembered[-1])
    if body.base_sequence == base_sequence + count:
        return None
    return errors.OutOfOrderSequence(
        f"enqueue batch with base_sequence {body.base_sequence} ({len(body.items)} messages) does not follow the "
        f"last one; expected {base_sequence + count}")


def _replayed_answers(raw: bytes, count: int) -> list:
    answers: list = [None] * count
    for index, code in _FAILURE.iter_unpack(raw[_SETTLED.size:]):
        answers[index] = _REFUSALS[code]("refused when this batch was first applied (this is a retry)")
    return answers


def _replayed(batch: bytes, count: int, first_seq: int, duplicates: int) -> tuple[Enqueued, ...]:
    known = dict(_DUPLICATE.iter_unpack(batch[_BATCH.size:_BATCH.size + duplicates * _DUPLICATE.size]))
    results, next_new = [], first_seq
    for i in range(count):
        if i in known:
            results.append(Enqueued(known[i], True))
        else:
            results.append(Enqueued(next_new, True))
            next_new += 1
    return tuple(results)
