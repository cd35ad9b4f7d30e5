"""The key index of a compacted stream partition: each key's latest record, kept by the state machine.

Table `keys`: b"k" + key -> offset >q | tombstone >B (1 when that record's value is null). The leading byte
keeps the empty key (which LMDB cannot store as a key) storable, so a key has at most KEY_BYTES_LIMIT bytes.

Every write goes through `IndexWriter`, which also keeps the index's digest (meta `index-digest`: the sum
modulo 2**64 of a CRC-32 per entry over its key and value, like the stored batches' digest in log/digest.py) in
the same transaction, so replicas that applied the same log hold the same index and the same digest. Records are
read out of a stored batch (`batch_records`) in either format the partition stores (Kafka's RecordBatch v2 or
raftbus's own, client/records.py): this is the per-record work a compacted partition does and a stream
partition without compaction never does.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from isal.isal_zlib import crc32

from raftbus.client import errors
from raftbus.client.records import STORED_HEADER, StoredBatch, decode_stored_batch

KEYS = "keys"
INDEX_DIGEST_KEY = b"index-digest"
KEY_PREFIX = b"k"
KEY_BYTES_LIMIT = 500  # LMDB keys are at most 511 bytes; the prefix and headroom take the rest
_ENTRY = struct.Struct(">qB")
_DIGEST = struct.Struct(">Q")
_OFFSET = struct.Struct(">q")
_MODULUS = 2**64


class Entry(NamedTuple):
    offset: int
    tombstone: bool


class KeyedRecord(NamedTuple):
    offset: int
    key: bytes
    value: bytes | None
    timestamp_ms: int
    headers: tuple = ()


def index_key(key: bytes) -> bytes:
    return KEY_PREFIX + key


def pack_entry(offset: int, tombstone: bool) -> bytes:
    return _ENTRY.pack(offset, 1 if tombstone else 0)


def unpack_entry(raw) -> Entry:
    offset, tombstone = _ENTRY.unpack(bytes(raw))
    return Entry(offset, bool(tombstone))


def batch_records(key: bytes, value) -> list[KeyedRecord]:
    """The records of one stored batch (its 8-byte offset key and stored value) with their offsets; CorruptBatch
    for a record without a key (a compacted partition refuses those) or with a key over KEY_BYTES_LIMIT."""
    base_offset = _OFFSET.unpack(bytes(key))[0]
    count, append_ms, max_ts, length = STORED_HEADER.unpack_from(value)
    batch = StoredBatch(base_offset, count, append_ms, max_ts, memoryview(value)[STORED_HEADER.size:])
    out = []
    for record in decode_stored_batch("", 0, batch):
        if record.key is None:
            raise errors.KeyRequired(f"the record at offset {record.offset} has no key; every record of a compacted "
                                     f"topic needs one")
        if len(record.key) > KEY_BYTES_LIMIT:
            raise errors.KeyTooLarge(f"the key of the record at offset {record.offset} has {len(record.key)} bytes; "
                                     f"a compacted topic's keys have at most {KEY_BYTES_LIMIT}")
        out.append(KeyedRecord(record.offset, bytes(record.key), record.value, record.timestamp_ms, record.headers))
    return out


def check_keys(records: bytes, record_count: int, key_bytes_max: int) -> None:
    """KeyRequired or KeyTooLarge unless every record of a produced batch has a key of at most `key_bytes_max`
    bytes (the leader's check before it proposes a batch for a compacted topic)."""
    for record in decode_stored_batch("", 0, StoredBatch(0, record_count, 0, 0, memoryview(records))):
        if record.key is None:
            raise errors.KeyRequired("every record of a compacted topic needs a key (its latest value per key is "
                                     "what compaction keeps)")
        if len(record.key) > key_bytes_max:
            raise errors.KeyTooLarge(f"a key of {len(record.key)} bytes is over compacted_key_bytes_max="
                                     f"{key_bytes_max}")


def load_digest(raw) -> int:
    return 0 if raw is None else _DIGEST.unpack(bytes(raw))[0]


def entry_term(stored_key: bytes, raw: bytes) -> int:
    return crc32(raw, crc32(stored_key))


def digest_of(items) -> int:
    """The digest of (stored key, entry) pairs, recomputed."""
    total = 0
    for stored_key, raw in items:
        total = (total + entry_term(bytes(stored_key), bytes(raw))) % _MODULUS
    return total


class IndexWriter:
    """The index writes of one command: puts and deletes through one transaction, the digest kept in step."""

    def __init__(self, txn, meta_table: str):
        self._txn = txn
        self._meta = meta_table
        self._digest = load_digest(txn.get(meta_table, INDEX_DIGEST_KEY))
        self._changed = False

    def set(self, key: bytes, offset: int, tombstone: bool, *, only_if_newer: bool = False) -> None:
        """The key's latest record is at `offset`; with `only_if_newer` the entry changes only when it is absent
        or older (a backfill meets records newer ones already indexed)."""
        stored = index_key(key)
        old = self._txn.get(KEYS, stored)
        if old is not None:
            if only_if_newer and unpack_entry(old).offset >= offset:
                return
            self._digest = (self._digest - entry_term(stored, bytes(old))) % _MODULUS
        raw = pack_entry(offset, tombstone)
        self._txn.put(KEYS, stored, raw)
        self._digest = (self._digest + entry_term(stored, raw)) % _MODULUS
        self._changed = True

    def delete_if_at(self, key: bytes, offset: int) -> bool:
        """Drop the key's entry when its latest record is still the one at `offset` (a tombstone removed)."""
        stored = index_key(key)
        old = self._txn.get(KEYS, stored)
        if old is None or unpack_entry(old).offset != offset:
            return False
        self._txn.delete(KEYS, stored)
        self._digest = (self._digest - entry_term(stored, bytes(old))) % _MODULUS
        self._changed = True
        return True

    def index_batch(self, key: bytes, value, *, only_if_newer: bool = False) -> int:
        """Index every record of one stored batch (later records of a key win); returns how many."""
        records = batch_records(key, value)
        latest: dict[bytes, KeyedRecord] = {}
        for record in records:
            latest[record.key] = record
        for record in latest.values():
            self.set(record.key, record.offset, record.value is None, only_if_newer=only_if_newer)
        return len(records)

    def finish(self) -> None:
        if self._changed:
            self._txn.put(self._meta, INDEX_DIGEST_KEY, _DIGEST.pack(self._digest))


def lookup(txn, key: bytes) -> Entry | None:
    raw = txn.get(KEYS, index_key(key))
    return None if raw is None else unpack_entry(raw)


def entries(txn, prefix: bytes = b"", start_after: bytes | None = None):
    """(key, Entry) of the index in key order, those starting with `prefix`, after `start_after` when given."""
    start = index_key(prefix if start_after is None or start_after < prefix else start_after)
    for stored, raw in txn.items(KEYS, start):
        stored = bytes(stored)
        key = stored[len(KEY_PREFIX):]
        if not key.startswith(prefix):
            return
        if start_after is not None and key <= start_after:
            continue
        yield key, unpack_entry(raw)
