"""The stream partition's state machine: appends batches, deduplicates producer retries, trims, reads by offset.

Pure: time arrives inside commands and storage is reached only through the Store seam. Every command and
the applied Raft index are written in one store transaction; readers on other threads use the immutable
`_LogState` published after each commit plus read transactions.

Tables:
    meta        b"state" -> _LogState (applied index, offsets, size, running max timestamp, oldest append time)
                b"digest" -> checksum of the stored batches; b"checkpoint" -> the last checkpoint (log/digest.py)
    batches     base_offset >q -> stored value (record_count >I, append_time_ms >q, max_timestamp_ms >q,
                records_len >I, records): key + value is one stored batch of client/records.py
    producers   producer_id -> last_seen_ms >q + up to 5 remembered batches (>qIqq each)
    time_index  running max timestamp (sign-flipped >Q) -> base offset >q of the batch that first reached it
    offsets     consumer groups' committed offsets (see groups/offset_state.py)
    keys        compacted partitions: each key's latest record (log/key_index.py); meta b"compaction" and
                b"index-digest" (log/compacted.py)
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from raftbus.client import errors
from raftbus.client.records import STORED_HEADER, StoredBatch, decode_stored_batch

from raftbus.broker import commands
from raftbus.broker.groups import commands as group_commands
from raftbus.broker.groups import offset_state
from raftbus.broker.log import compacted
from raftbus.broker.log import compaction_commands as compaction
from raftbus.broker.log import digest as batch_digest
from raftbus.broker.log import key_index
from raftbus.broker.log.compacted import CompactionState

META, BATCHES, PRODUCERS, TIME_INDEX = "meta", "batches", "producers", "time_index"
STATE_KEY = b"state"
PRODUCER_BATCHES_MAX = 5
_NO_TIMESTAMP = -(2**63)

_OFFSET = struct.Struct(">q")
_TIMESTAMP_KEY = struct.Struct(">Q")
_LAST_SEEN = struct.Struct(">q")
_PRODUCER_BATCH = struct.Struct(">qIqq")  # base_sequence, record_count, base_offset, append_time_ms


class ProduceResult(NamedTuple):
    base_offset: int
    duplicate: bool
    append_time_ms: int


class ReadResult(NamedTuple):
    high_watermark: int
    log_start_offset: int
    batches: bytes


class _LogState(NamedTuple):
    applied_index: int = 0
    log_start_offset: int = 0
    high_watermark: int = 0
    size_bytes: int = 0
    max_timestamp_ms: int = _NO_TIMESTAMP
    oldest_append_time_ms: int = -1


_STATE = struct.Struct(">qqqqqq")


class _ProducerBatch(NamedTuple):
    base_sequence: int
    record_count: int
    base_offset: int
    append_time_ms: int


def _offset_key(offset: int) -> bytes:
    return _OFFSET.pack(offset)


def _timestamp_key(timestamp_ms: int) -> bytes:
    """Big-endian with the sign bit flipped, so negative timestamps sort first."""
    return _TIMESTAMP_KEY.pack(timestamp_ms + 2**63)


def _load_producer(raw: bytes | None) -> tuple[int, tuple[_ProducerBatch, ...]]:
    if raw is None:
        return -1, ()
    (last_seen_ms,) = _LAST_SEEN.unpack_from(raw)
    batches = tuple(_ProducerBatch(*fields) for fields in _PRODUCER_BATCH.iter_unpack(raw[_LAST_SEEN.size:]))
    return last_seen_ms, batches


def _next_in_order(raw: bytes | None, produce: commands.ProduceCommand) -> bytes | None:
    """The producer's kept batches (packed, the oldest dropped when full) when `produce` is the batch that follows
    its last one, else None. Sequences only grow batch after batch (`_check_sequence`), so a batch that follows
    the last cannot be a retry of a remembered one: this reads only the last, where the full check parses all."""
    if raw is None or len(raw) <= _LAST_SEEN.size:
        return None
    last_sequence, last_count, _, _ = _PRODUCER_BATCH.unpack_from(raw, len(raw) - _PRODUCER_BATCH.size)
    if produce.base_sequence != last_sequence + last_count:
        return None
    held = (len(raw) - _LAST_SEEN.size) // _PRODUCER_BATCH.size
    return raw[_LAST_SEEN.size + _PRODUCER_BATCH.size * max(0, held + 1 - PRODUCER_BATCHES_MAX):]


class PartitionStateMachine:
    TABLES = (META, BATCHES, PRODUCERS, TIME_INDEX, offset_state.OFFSETS, key_index.KEYS)

    def __init__(self, store):
        self._store = store
        self._state = _LogState()
        self._compaction = CompactionState()
        self.reload()

    # ------------------------------------------------------------------ apply (the Raft thread)
    def apply(self, index: int, command: bytes):
        """Apply one committed command; returns a result or a typed error value.

        A typed error raised while deciding is an answer (every replica decides the same). Anything else — a
        StorageFailure, an OSError — propagates with nothing of the command committed: the replica must stop
        applying rather than skip an entry the others applied (RaftGroup does that)."""
        if index <= self._state.applied_index:
            return None
        try:
            kind, payload = commands.decode(command)
            with self._store.write() as txn:
                before = self._compaction
                result, state = self._dispatch(txn, kind, payload, index)
                state = state._replace(applied_index=index)
                txn.put(META, STATE_KEY, _STATE.pack(*state))
                if self._pending_compaction != before:
                    txn.put(META, compacted.COMPACTION_KEY, compacted.dump(self._pending_compaction))
        except errors.RaftbusError as refusal:  # nothing of the command was committed
            self._pending_compaction = self._compaction
            return refusal
        self._state = state
        self._compaction = self._pending_compaction
        return result

    _pending_compaction = CompactionState()

    def _dispatch(self, txn, kind: str, payload, index: int):
        self._pending_compaction = self._compaction
        if kind == commands.PRODUCE:
            return self._produce(txn, payload)
        if kind == compaction.CONDITIONAL:
            return self._produce(txn, payload.produce, payload.expected_revision)
        if kind in (compaction.POLICY, compaction.BACKFILL, compaction.COMPACT):
            return self._compaction_command(txn, kind, payload)
        if kind == commands.TRIM:
            return self._trim(txn, payload)
        if kind == commands.START_AT:
            return self._start_at(payload)
        if kind == commands.INVALID:
            return payload, self._state
        if kind == commands.BARRIER:
            return None, self._state
        if kind == commands.CHECKPOINT:
            return self._checkpoint(txn, index), self._state
        if kind == group_commands.COMMIT_OFFSET:  # consumer groups
            return offset_state.commit(txn, self._state.high_watermark, payload), self._state
        if kind == group_commands.READ_OFFSET:
            return offset_state.read(txn, payload), self._state
        if kind == group_commands.EXPIRE_OFFSETS:
            return offset_state.expire(txn, payload), self._state
        if kind == group_commands.DELETE_OFFSET:
            return offset_state.delete(txn, payload), self._state
        return errors.InvalidArgument(f"{kind} is not a partition command"), self._state

    def _compaction_command(self, txn, kind: str, payload):
        state, current = self._state, self._compaction
        if kind == compaction.POLICY:
            self._pending_compaction = compacted.switch(current, payload, state.high_watermark)
            return self._pending_compaction, state
        if kind == compaction.BACKFILL:
            indexed, self._pending_compaction = compacted.backfill(txn, META, BATCHES, current, payload,
                                                                   state.log_start_offset)
            return indexed, state
        applied, self._pending_compaction = compacted.compact(txn, META, BATCHES, current, payload,
                                                              state.log_start_offset)
        return applied, state._replace(size_bytes=state.size_bytes + applied.size_delta)

    def _produce(self, txn, produce: commands.ProduceCommand, expected_revision: int | None = None):
        state = self._state
        producer_id = produce.producer_id
        if producer_id:
            raw = txn.get(PRODUCERS, producer_id)
            kept = _next_in_order(raw, produce)
            if kept is None:
                _, remembered = _load_producer(raw)
                refusal = _check_sequence(remembered, produce)
                if refusal is not None:
                    return refusal, state
                kept = b"".join(_PRODUCER_BATCH.pack(*b) for b in remembered[1 - PRODUCER_BATCHES_MAX:])
        base_offset = state.high_watermark
        key = _offset_key(base_offset)
        if expected_revision is not None:
            if not self._compaction.index_ready(state.log_start_offset):
                raise errors.NotCompacted("compare-and-set needs a compacted topic whose key index is built")
            current = compacted.check_revision(txn, key, produce.value, expected_revision, state.log_start_offset)
            if current is not None:  # the conflict is remembered: a retry of this batch gets it again
                if producer_id:
                    conflict = _PRODUCER_BATCH.pack(produce.base_sequence, produce.record_count, _CONFLICT - current,
                                                    produce.append_time_ms)
                    txn.put(PRODUCERS, producer_id, _LAST_SEEN.pack(produce.append_time_ms) + kept + conflict)
                return _revision_mismatch(expected_revision, current), state
        if self._compaction.compacted:
            compacted.index_append(txn, META, key, produce.value)
        txn.put(BATCHES, key, produce.value)
        digest = None if state.log_start_offset != state.high_watermark else 0  # an empty store starts tracking
        digest = batch_digest.load(txn.get(META, batch_digest.DIGEST_KEY)) if digest is None else digest
        if digest is not None:
            term = batch_digest.batch_term(key, produce.value)
            txn.put(META, batch_digest.DIGEST_KEY, batch_digest.dump(batch_digest.add(digest, term)))
        if producer_id:
            batch = _PRODUCER_BATCH.pack(produce.base_sequence, produce.record_count, base_offset,
                                         produce.append_time_ms)
            txn.put(PRODUCERS, producer_id, _LAST_SEEN.pack(produce.append_time_ms) + kept + batch)
        max_timestamp_ms = commands.stored_max_timestamp_ms(produce.value)
        if max_timestamp_ms > state.max_timestamp_ms:
            txn.put(TIME_INDEX, _timestamp_key(max_timestamp_ms), _offset_key(base_offset))
        state = state._replace(
            high_watermark=base_offset + produce.record_count,
            size_bytes=state.size_bytes + _OFFSET.size + len(produce.value),
            max_timestamp_ms=max(max_timestamp_ms, state.max_timestamp_ms),
            oldest_append_time_ms=(produce.append_time_ms if state.log_start_offset == state.high_watermark
                                   else state.oldest_append_time_ms),
        )
        return ProduceResult(base_offset, False, produce.append_time_ms), state

    def _checkpoint(self, txn, index: int) -> batch_digest.Checkpoint:
        """The batches' digest, plus the key index's on a compacted partition (so replicas compare both)."""
        state = self._state
        digest = batch_digest.load(txn.get(META, batch_digest.DIGEST_KEY))
        if self._compaction.compacted:
            digest = batch_digest.add(digest, key_index.load_digest(txn.get(META, key_index.INDEX_DIGEST_KEY)))
        checkpoint = batch_digest.Checkpoint(index, state.log_start_offset, state.high_watermark, digest)
        txn.put(META, batch_digest.CHECKPOINT_KEY, batch_digest.dump_checkpoint(checkpoint))
        return checkpoint

    def _start_at(self, offset: int):
        """An empty partition moves its log start and high watermark to `offset` (never back): a restored backup
        then gets every record at its original offset."""
        state = self._state
        if state.log_start_offset != state.high_watermark:
            return errors.InvalidArgument(f"only an empty partition can start at another offset; this one holds "
                                          f"[{state.log_start_offset}, {state.high_watermark})"), state
        if offset < state.high_watermark:
            return errors.InvalidArgument(f"offset {offset} is below the partition's next offset "
                                          f"{state.high_watermark}"), state
        state = state._replace(log_start_offset=offset, high_watermark=offset)
        return offset, state

    def _trim(self, txn, trim: commands.TrimCommand):
        state = _remove_old_batches(txn, self._state, trim)
        _drop_time_entries_before(txn, state.log_start_offset)
        _expire_producers(txn, trim.now_ms, trim.producer_idle_ms)
        return state.log_start_offset, state

    # ------------------------------------------------------------------ reads (any thread)
    def applied_index(self) -> int:
        return self._state.applied_index

    def offsets(self) -> tuple[int, int]:
        """(log_start_offset, high_watermark)."""
        state = self._state
        return state.log_start_offset, state.high_watermark

    def size_bytes(self) -> int:
        return self._state.size_bytes

    def oldest_append_time_ms(self) -> int | None:
        state = self._state
        return None if state.log_start_offset == state.high_watermark else state.oldest_append_time_ms

    def read(self, offset: int, max_bytes: int) -> ReadResult:
        """Stored batches from the one holding `offset` on, at least one, up to max_bytes when more than one."""
        with self._store.read() as txn:
            state = _state_in(txn)
            if not state.log_start_offset <= offset <= state.high_watermark:
                raise errors.OffsetOutOfRange(
                    f"offset {offset} is outside the log: log_start_offset={state.log_start_offset}, "
                    f"high_watermark={state.high_watermark}")
            batches = b"" if offset == state.high_watermark else _collect(txn, offset, max_bytes)
        return ReadResult(state.high_watermark, state.log_start_offset, batches)

    def offset_for_time(self, timestamp_ms: int) -> int:
        """The base offset of the first batch whose max timestamp is >= timestamp_ms, else the high watermark."""
        with self._store.read() as txn:
            state = _state_in(txn)
            found = next(txn.items(TIME_INDEX, _timestamp_key(timestamp_ms)), None)
        if found is None:
            return state.high_watermark
        return max(_OFFSET.unpack(found[1])[0], state.log_start_offset)

    # checksums (log/digest.py)
    def checkpoint(self) -> batch_digest.Checkpoint | None:
        """The last checkpoint applied here."""
        with self._store.read() as txn:
            return batch_digest.load_checkpoint(txn.get(META, batch_digest.CHECKPOINT_KEY))

    def store_consistent(self) -> bool | None:
        """Whether the stored batches still add up to the kept digest (one read transaction; None: untracked)."""
        with self._store.read() as txn:
            kept = batch_digest.load(txn.get(META, batch_digest.DIGEST_KEY))
            state = _state_in(txn)
            if kept is None:
                return None if state.log_start_offset != state.high_watermark else True
            if batch_digest.of_batches(txn.items(BATCHES)) != kept:
                return False
            index_kept = key_index.load_digest(txn.get(META, key_index.INDEX_DIGEST_KEY))
            return key_index.digest_of(txn.items(key_index.KEYS)) == index_kept

    # consumer groups
    def committed(self, group: str) -> offset_state.CommittedOffset | None:
        """The group's committed offset here as applied so far (not a read barrier)."""
        with self._store.read() as txn:
            return offset_state.load(txn, group)

    def highest_generation(self, group: str) -> int:
        """The highest generation seen here for the group (commits and new owners' reads), as applied so far."""
        with self._store.read() as txn:
            return offset_state.highest_generation(txn, group)

    def offsets_committed_before(self, cutoff_ms: int) -> list[str]:
        """Groups whose offset here was last committed before `cutoff_ms` (as applied so far)."""
        with self._store.read() as txn:
            return offset_state.committed_before(txn, cutoff_ms)

    def append_time_ms_at(self, offset: int) -> int | None:
        """When the batch holding `offset` was appended (the oldest batch for an offset below the log start);
        None at or beyond the high watermark."""
        with self._store.read() as txn:
            state = _state_in(txn)
            if offset >= state.high_watermark:
                return None
            found = txn.floor(BATCHES, _offset_key(max(offset, state.log_start_offset)))
        return None if found is None else commands.stored_header(found[1])[1]

    # compacted partitions (log/compacted.py, log/key_index.py)
    def compaction_state(self) -> CompactionState:
        return self._compaction

    def lookup(self, key: bytes) -> tuple[key_index.Entry | None, int]:
        """(the key's index entry or None, the high watermark it was read at), as applied so far."""
        with self._store.read() as txn:
            return key_index.lookup(txn, key), _state_in(txn).high_watermark

    def record_at(self, offset: int):
        """The record stored at `offset` (a client Record), None when no record is there."""
        with self._store.read() as txn:
            found = txn.floor(BATCHES, _offset_key(offset))
        if found is None:
            return None
        key, value = found
        count, append_ms, max_ts, _ = commands.stored_header(value)
        batch = StoredBatch(_OFFSET.unpack(key)[0], count, append_ms, max_ts, memoryview(value)[STORED_HEADER.size:])
        return next((r for r in decode_stored_batch("", 0, batch, offset) if r.offset == offset), None)

    def key_entries(self, prefix: bytes, start_after: bytes | None, limit: int) -> list[tuple[bytes, key_index.Entry]]:
        """Up to `limit` live keys (not deleted, not below the log start) with their entries, in key order."""
        out = []
        with self._store.read() as txn:
            log_start = _state_in(txn).log_start_offset
            for key, entry in key_index.entries(txn, prefix, start_after):
                if entry.tombstone or entry.offset < log_start:
                    continue
                out.append((key, entry))
                if len(out) >= limit:
                    break
        return out

    def stored_batches(self, start_offset: int, bytes_max: int) -> list[tuple[bytes, bytes]]:
        """Stored (key, value) batches from the one at or after `start_offset`, up to `bytes_max` (at least one)."""
        out, total = [], 0
        with self._store.read() as txn:
            for key, value in txn.items(BATCHES, _offset_key(start_offset)):
                if out and total + len(value) > bytes_max:
                    break
                out.append((bytes(key), bytes(value)))
                total += len(key) + len(value)
        return out

    def dirty(self, since_offset: int) -> tuple[int, int | None]:
        """(stored bytes, append time of the first) of the batches at or after `since_offset` but the last one:
        what a compaction pass could clean that the last did not."""
        total, first_ms, previous = 0, None, None
        with self._store.read() as txn:
            for key, value in txn.items(BATCHES, _offset_key(max(since_offset, 0))):
                if previous is not None:
                    total += previous
                    if first_ms is None:
                        first_ms = pending_ms
                previous, pending_ms = len(key) + len(value), commands.stored_header(value)[1]
        return total, first_ms

    def backfill_start(self, index_from: int, bytes_max: int) -> int:
        """Where a backfill ending at `index_from` starts so that it indexes at most `bytes_max` stored bytes (at
        least one batch); the log start when nothing is stored below."""
        total, start = 0, None
        with self._store.read() as txn:
            log_start = _state_in(txn).log_start_offset
            if index_from <= log_start:
                return log_start
            for key, value in txn.items(BATCHES, _offset_key(index_from - 1), reverse=True):
                offset = _OFFSET.unpack(key)[0]
                if offset >= index_from:
                    continue
                if offset < log_start or (start is not None and total + len(value) > bytes_max):
                    break
                total += len(key) + len(value)
                start = offset
        return log_start if start is None else start

    def last_batch_offset(self) -> int | None:
        """The base offset of the partition's last stored batch."""
        with self._store.read() as txn:
            found = txn.last(BATCHES)
        return None if found is None else _OFFSET.unpack(found[0])[0]

    def reload(self) -> None:
        """Re-read the published state from the store (after a snapshot restore)."""
        with self._store.read() as txn:
            self._state = _state_in(txn)
            self._compaction = compacted.load(txn.get(META, compacted.COMPACTION_KEY))
        self._pending_compaction = self._compaction


def _state_in(txn) -> _LogState:
    raw = txn.get(META, STATE_KEY)
    return _LogState() if raw is None else _LogState(*_STATE.unpack(raw))


def _check_sequence(remembered: tuple[_ProducerBatch, ...], produce: commands.ProduceCommand):
    """None to append; a ProduceResult for a retried batch; OutOfOrderSequence for a gap or an old sequence;
    UnknownProducerId for a producer without state here whose batch does not start at sequence 0.

    An unknown producer must start at 0: a later batch appended first (its earlier batches failed over to
    another broker, or were refused while this one was being elected) would make those earlier batches
    impossible to append ever after."""
    if not remembered:
        if produce.base_sequence == 0:
            return None
        return errors.UnknownProducerId(
            f"no state for this producer id and its batch starts at sequence {produce.base_sequence}, not 0; "
            f"earlier batches come first")
    for batch in remembered:
        if batch.base_sequence == produce.base_sequence and batch.record_count == produce.record_count:
            if batch.base_offset < 0:  # a compare-and-set that was refused
                return _revision_mismatch(None, _CONFLICT - batch.base_offset)
            return ProduceResult(batch.base_offset, True, batch.append_time_ms)
    last = remembered[-1]
    expected = last.base_sequence + last.record_count
    if produce.base_sequence == expected:
        return None
    return errors.OutOfOrderSequence(
        f"batch with base_sequence {produce.base_sequence} ({produce.record_count} records) does not follow "
        f"the last appended sequence; expected {expected}")


_CONFLICT = -2  # a refused compare-and-set is remembered at base offset _CONFLICT - the key's revision then


def _revision_mismatch(expected: int | None, current: int) -> errors.RevisionMismatch:
    wanted = "" if expected is None else f"expected revision {expected}; "
    return errors.RevisionMismatch(f"{wanted}the key's revision is {current} (-1: no value); nothing was written")


def _collect(txn, offset: int, max_bytes: int) -> bytes:
    floor = txn.floor(BATCHES, _offset_key(offset))
    parts: list[bytes] = []
    total = 0
    for key, value in txn.items(BATCHES, floor[0] if floor else None):
        size = len(key) + len(value)
        if parts and total + size > max_bytes:
            break
        parts.append(key)
        parts.append(value)
        total += size
    return b"".join(parts)


def _remove_old_batches(txn, state: _LogState, trim: commands.TrimCommand) -> _LogState:
    """Delete whole batches from the start while older than the retention time or beyond the retention size."""
    cutoff_ms = trim.now_ms - trim.retention_ms if trim.retention_ms >= 0 else None
    size_bytes = state.size_bytes
    doomed: list[bytes] = []
    next_start, oldest_ms = state.high_watermark, -1
    digest = batch_digest.load(txn.get(META, batch_digest.DIGEST_KEY))
    for key, value in txn.items(BATCHES):
        _, append_time_ms, _, _ = commands.stored_header(value)
        too_old = cutoff_ms is not None and append_time_ms <= cutoff_ms
        too_big = trim.retention_bytes >= 0 and size_bytes > trim.retention_bytes
        if not (too_old or too_big):
            next_start, oldest_ms = _OFFSET.unpack(key)[0], append_time_ms
            break
        doomed.append(key)
        digest = batch_digest.remove(digest, batch_digest.batch_term(bytes(key), value))
        size_bytes -= len(key) + len(value)
    for key in doomed:
        txn.delete(BATCHES, key)
    if digest is not None and doomed:
        txn.put(META, batch_digest.DIGEST_KEY, batch_digest.dump(digest))
    return state._replace(log_start_offset=next_start if doomed else state.log_start_offset,
                          size_bytes=size_bytes,
                          oldest_append_time_ms=oldest_ms if doomed else state.oldest_append_time_ms)


def _drop_time_entries_before(txn, log_start_offset: int) -> None:
    """Drop time-index entries of removed batches, keeping the newest (reads clamp it to the log start)."""
    stale = []
    for key, value in txn.items(TIME_INDEX):
        if _OFFSET.unpack(value)[0] >= log_start_offset:
            break
        stale.append(key)
    for key in stale[:-1]:
        txn.delete(TIME_INDEX, key)


def _expire_producers(txn, now_ms: int, producer_idle_ms: int) -> None:
    if producer_idle_ms < 0:
        return
    idle = [pid for pid, raw in txn.items(PRODUCERS) if now_ms - _LAST_SEEN.unpack_from(raw)[0] > producer_idle_ms]
    for producer_id in idle:
        txn.delete(PRODUCERS, producer_id)
