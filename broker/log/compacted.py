"""A compacted stream partition's part of the state machine: its key index kept with each append, compare-and-set,
the index built over records appended before the partition was compacted, and compaction commands applied.

Pure like the rest of PartitionStateMachine: each function works in the command's write transaction and decides
only from the store and the command. meta b"compaction" -> compacted >B | index_from >q | cleaned_offset >q:
whether the partition keeps a key index, the first offset the index covers (the log start once built) and the
end of the last compaction pass.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from raftbus.client import errors

from raftbus.broker.log import digest as batch_digest
from raftbus.broker.log import key_index
from raftbus.broker.log.compaction_commands import Backfill, Compact
from raftbus.broker.log.key_index import IndexWriter

COMPACTION_KEY = b"compaction"
NO_REVISION = -1  # compare-and-set: the key has no record (or its latest is a tombstone)
_STATE = struct.Struct(">Bqq")
_OFFSET = struct.Struct(">q")


class CompactionState(NamedTuple):
    compacted: bool = False
    index_from: int = 0
    cleaned_offset: int = 0

    def index_ready(self, log_start_offset: int) -> bool:
        """Whether the index covers every record from the log start on."""
        return self.compacted and self.index_from <= log_start_offset


def load(raw) -> CompactionState:
    if raw is None:
        return CompactionState()
    compacted, index_from, cleaned = _STATE.unpack(bytes(raw))
    return CompactionState(bool(compacted), index_from, cleaned)


def dump(state: CompactionState) -> bytes:
    return _STATE.pack(1 if state.compacted else 0, state.index_from, state.cleaned_offset)


# ---------------------------------------------------------------------- appends
def index_append(txn, meta: str, key: bytes, value) -> None:
    """Index one appended batch (raises KeyRequired or KeyTooLarge before anything is written)."""
    writer = IndexWriter(txn, meta)
    writer.index_batch(key, value)
    writer.finish()


def check_revision(txn, key: bytes, value, expected_revision: int, log_start_offset: int) -> int | None:
    """None when a compare-and-set of this one-record batch holds, else the key's current revision."""
    records = key_index.batch_records(key, value)
    if len(records) != 1:
        raise errors.InvalidArgument(f"a compare-and-set writes one record, not {len(records)}")
    entry = key_index.lookup(txn, records[0].key)
    current = current_revision(entry, log_start_offset)
    if expected_revision == current or (entry is not None and entry.tombstone and expected_revision == entry.offset):
        return None
    return current


def current_revision(entry, log_start_offset: int) -> int:
    """A key's revision for compare-and-set: its latest record's offset, NO_REVISION when it has none (or a
    tombstone, or an entry that retention left below the log start)."""
    if entry is None or entry.tombstone or entry.offset < log_start_offset:
        return NO_REVISION
    return entry.offset


# ---------------------------------------------------------------------- policy and backfill
def switch(state: CompactionState, compacted: bool, high_watermark: int) -> CompactionState:
    """Turn the key index on (it covers what is appended from now on, and backfills build it back to the log
    start) or off (its entries stay, unused, until it is turned on again and the backfill corrects them)."""
    if compacted == state.compacted:
        return state
    return state._replace(compacted=compacted, index_from=high_watermark if compacted else state.index_from)


def backfill(txn, meta: str, batches: str, state: CompactionState, command: Backfill,
             log_start_offset: int) -> tuple[int, CompactionState]:
    """Index the batches in [from_offset, index_from): entries change only where absent or older. Returns how
    many records were indexed; refuses a range that does not end where the index starts."""
    if not state.compacted or command.to_offset != state.index_from:
        raise errors.InvalidArgument(f"backfill of [{command.from_offset}, {command.to_offset}) does not end where "
                                     f"the key index starts ({state.index_from})")
    start = max(command.from_offset, log_start_offset)
    writer = IndexWriter(txn, meta)
    indexed = 0
    for key, value in txn.items(batches, _OFFSET.pack(start)):
        if _OFFSET.unpack(bytes(key))[0] >= command.to_offset:
            break
        indexed += writer.index_batch(bytes(key), value, only_if_newer=True)
    writer.finish()
    return indexed, state._replace(index_from=start)


# ---------------------------------------------------------------------- compaction
class Applied(NamedTuple):
    rewritten: int      # batches replaced or removed
    skipped: int        # batches the command planned that changed or went meanwhile
    size_delta: int     # stored bytes added (negative: removed)


def compact(txn, meta: str, batches: str, state: CompactionState, command: Compact,
            log_start_offset: int) -> tuple[Applied, CompactionState]:
    """Apply the leader's rewrites to the batches still stored as it planned them (their digest term unchanged);
    a batch that changed or went since (retention, an earlier pass) is left as it is. The batches' digest, the
    index (the tombstones removed) and the partition's size follow in the same transaction."""
    if not state.index_ready(log_start_offset):
        raise errors.NotCompacted("the partition is not compacted (or its key index is still being built)")
    digest = batch_digest.load(txn.get(meta, batch_digest.DIGEST_KEY))
    writer = IndexWriter(txn, meta)
    rewritten = skipped = size_delta = 0
    for rewrite in command.rewrites:
        key = _OFFSET.pack(rewrite.base_offset)
        old = txn.get(batches, key)
        if old is None or batch_digest.batch_term(key, old) != rewrite.old_term:
            skipped += 1
            continue
        digest = batch_digest.remove(digest, rewrite.old_term)
        if rewrite.new_value is None:
            txn.delete(batches, key)
            size_delta -= len(key) + len(old)
        else:
            txn.put(batches, key, rewrite.new_value)
            digest = batch_digest.add(digest, batch_digest.batch_term(key, rewrite.new_value))
            size_delta += len(rewrite.new_value) - len(old)
        for offset, record_key in rewrite.tombstones:
            writer.delete_if_at(record_key, offset)
        rewritten += 1
    if digest is not None and rewritten:
        txn.put(meta, batch_digest.DIGEST_KEY, batch_digest.dump(digest))
    writer.finish()
    if command.cleaned_offset >= 0:
        state = state._replace(cleaned_offset=max(state.cleaned_offset, command.cleaned_offset))
    return Applied(rewritten, skipped, size_delta), state
