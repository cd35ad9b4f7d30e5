"""Compaction of a stream partition, pure: what a pass removes (planned by the leader, off the Raft loop) and how a
replica applies it (on the Raft loop, one LMDB transaction per command). See docs/compaction.md.

A record is removed when all of these hold, decided from the key index (each key's latest record) and the time
the leader stamped into the command:
- its batch was appended at least `min_compaction_lag_ms` before `now_ms` (younger batches are not looked at);
- it is not a tombstone (a null value) appended less than `delete_retention_ms` before `now_ms`: no tombstone goes
  before that, whether a later record of its key exists or not;
- a later record of its key exists (the index points past it), or its key has no entry (the key was deleted and
  its tombstone has expired), or it is its key's latest record, a tombstone (then past `delete_retention_ms`).
Offsets never change: a batch keeps its base offset and the surviving records keep their offset deltas
(`kafka_batch.retain_records`); a batch left without records is removed. The partition's last batch is never
planned (it bounds the pass), so a read below the high watermark always finds a batch.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from raftbus.client import kafka_batch
from raftbus.client.records import STORED_HEADER

from raftbus.broker.log import digest as batch_digest
from raftbus.broker.log import key_index
from raftbus.broker.log.compaction_commands import Rewrite, rewrite_bytes
from raftbus.broker.log.key_index import Entry

_OFFSET_BYTES = 8
KEY_MAP_ENTRY_OVERHEAD_BYTES = 100  # a dict slot, the key's bytes object and the entry tuple


class Knobs(NamedTuple):
    """A topic's compaction knobs that decide what a pass removes."""

    min_compaction_lag_ms: int
    delete_retention_ms: int


class Step(NamedTuple):
    """What one compact command of a pass holds, and where the next one starts."""

    rewrites: tuple[Rewrite, ...]
    next_offset: int          # the base offset of the first batch not looked at (the pass's end when reached)
    scanned_bytes: int        # stored bytes of the batches looked at
    removed_records: int
    removed_bytes: int
    tombstone_due_ms: int | None  # when the earliest tombstone kept (its key's latest record) may go
    finished: bool            # the pass ends here: at its end offset, or at a batch younger than the lag


class KeyMap:
    """Each key's latest record as the index says, read once per key and pass; bounded by `bytes_max` (cleared
    when full: later lookups read the index again)."""

    def __init__(self, bytes_max: int):
        self._bytes_max = bytes_max
        self.lookup: Callable[[bytes], Entry | None] = lambda key: None  # the index as the current step reads it
        self._entries: dict[bytes, Entry | None] = {}
        self._bytes = 0
        self.peak_bytes = 0

    def latest(self, key: bytes) -> Entry | None:
        try:
            return self._entries[key]
        except KeyError:
            pass
        entry = self.lookup(key)
        size = len(key) + KEY_MAP_ENTRY_OVERHEAD_BYTES
        if self._bytes + size > self._bytes_max:
            self._entries.clear()
            self._bytes = 0
        self._entries[key] = entry
        self._bytes += size
        self.peak_bytes = max(self.peak_bytes, self._bytes)
        return entry


def plan_step(batches: Iterable[tuple[bytes, bytes]], key_map: KeyMap, now_ms: int, knobs: Knobs, end_offset: int,
              command_bytes_max: int) -> Step:
    """One command's rewrites over `batches` (stored (key, value) pairs in offset order) below `end_offset`, the
    key map reading the index through `key_map.lookup`: it stops at the first batch appended less than
    `min_compaction_lag_ms` ago, at `end_offset`, or before the rewrite that would take the command past
    `command_bytes_max` (one rewrite always fits): what the command carries and the stored bytes it replaces both
    count, so the bound also bounds the work of applying it."""
    superseded_before = now_ms - knobs.min_compaction_lag_ms
    tombstones_before = now_ms - knobs.delete_retention_ms
    rewrites: list[Rewrite] = []
    size = scanned = removed = removed_bytes = 0
    due_ms = None
    next_offset, finished = None, False
    for raw_key, value in batches:
        key = bytes(raw_key)
        base_offset = int.from_bytes(key, "big", signed=True)
        append_ms = STORED_HEADER.unpack_from(value)[1]
        if base_offset >= end_offset or append_ms > superseded_before:
            next_offset, finished = min(base_offset, end_offset), True
            break
        keep, tombstones, batch_due = _survivors(key, value, key_map, append_ms, tombstones_before,
                                                 knobs.delete_retention_ms)
        rewrite = _rewrite(key, value, base_offset, keep, tombstones)
        if rewrite is not None:
            added = rewrite_bytes(rewrite) + len(value)
            if rewrites and size + added > command_bytes_max:
                next_offset = base_offset
                break
            rewrites.append(rewrite)
            size += added
            removed_bytes += len(value) - len(rewrite.new_value or b"") + (0 if rewrite.new_value else _OFFSET_BYTES)
            removed += _record_count(value) - len(keep)
        if batch_due is not None:
            due_ms = batch_due if due_ms is None else min(due_ms, batch_due)
        scanned += _OFFSET_BYTES + len(value)
        next_offset = base_offset + 1
    if next_offset is None or next_offset >= end_offset:  # nothing left below the end
        next_offset, finished = end_offset, True
    return Step(tuple(rewrites), next_offset, scanned, removed, removed_bytes, due_ms, finished)


def _record_count(value) -> int:
    """The records a stored batch holds (a compacted Kafka batch holds fewer than its offsets span)."""
    blob = memoryview(value)[STORED_HEADER.size:]
    if kafka_batch.is_kafka_batch(blob):
        return kafka_batch.read_header(blob).record_count
    return STORED_HEADER.unpack_from(value)[0]


def _survivors(key: bytes, value, key_map: KeyMap, append_ms: int, tombstones_before: int,
               delete_retention_ms: int) -> tuple[list[int], list[tuple[int, bytes]], int | None]:
    """(offsets kept, (offset, key) of the tombstones removed, when the earliest kept tombstone may go)."""
    keep, tombstones, due_ms = [], [], None
    expired = append_ms <= tombstones_before
    for record in key_index.batch_records(key, value):
        latest = key_map.latest(record.key)
        if record.value is None and not expired:  # no tombstone goes before delete_retention_ms, latest or not
            due_ms = append_ms + delete_retention_ms if due_ms is None else min(due_ms, append_ms + delete_retention_ms)
            keep.append(record.offset)
            continue
        if latest is None or latest.offset > record.offset:
            continue  # superseded, or its key was deleted and the tombstone is gone
        if latest.offset < record.offset:
            keep.append(record.offset)  # the index never points before a key's latest record; kept to be safe
            continue
        if latest.tombstone:  # the key's latest record, an expired tombstone: the key leaves the index
            tombstones.append((record.offset, record.key))
            continue
        keep.append(record.offset)
    return keep, tombstones, due_ms


def _rewrite(key: bytes, value, base_offset: int, keep: list[int], tombstones) -> Rewrite | None:
    """The rewrite of one stored batch keeping the records at `keep`; None when it keeps them all."""
    if len(keep) == _record_count(value):
        return None
    term = batch_digest.batch_term(key, value)
    if not keep:
        return Rewrite(base_offset, term, None, tuple(tombstones))
    span, append_ms, max_ts, _ = STORED_HEADER.unpack_from(value)
    blob = memoryview(value)[STORED_HEADER.size:]
    deltas = {offset - base_offset for offset in keep}
    if kafka_batch.is_kafka_batch(blob):
        new_blob = kafka_batch.retain_records(blob, deltas)
    else:
        new_blob = _as_kafka_batch(key, value, base_offset, span, keep)
    return Rewrite(base_offset, term, STORED_HEADER.pack(span, append_ms, max_ts, len(new_blob)) + new_blob,
                   tuple(tombstones))


def _as_kafka_batch(key: bytes, value, base_offset: int, span: int, keep: list[int]) -> bytes:
    """A batch in raftbus's own format (whose offsets follow from record positions) rewritten as a Kafka batch,
    which carries each record's offset delta: the survivors at their offsets, the batch's span kept."""
    kept = set(keep)
    records = [r for r in key_index.batch_records(key, value) if r.offset in kept]
    base_ts = records[0].timestamp_ms
    body = b"".join(kafka_batch.encode_record(r.offset - base_offset, r.timestamp_ms - base_ts, r.key, r.value,
                                                 r.headers)
                    for r in records)
    return kafka_batch.seal(base_offset, kafka_batch.NONE, len(records), base_ts,
                            max(r.timestamp_ms for r in records), body, last_offset_delta=span - 1)
