"""A checksum of everything a store holds, kept up to date by the write transaction of each applied command.

The content digest of a store is the sum, modulo 2**64, of a CRC-32 per stored pair (over its table name, key and
value), leaving out the pair that keeps the digest itself. It is a pure function of the content, so:
- replicas that applied the same log the same way hold the same digest at the same applied index, whatever
  order or history brought them there (a snapshot install, a rebuild, a migration);
- recomputing it from the stored pairs and comparing with the kept value finds bit rot or a store changed
  behind the state machine's back (`consistent`).

`DigestingTxn` wraps a state machine's write transaction: each put or delete subtracts the term of the value it
replaces and adds the new one (one extra read per written key), and `finish` writes the digest in the same
transaction as the command's other writes and its applied index. `DigestHistory` keeps the digest after each of
the last applied commands in memory, so a replica can answer "your digest at index I" for an index the leader
named a moment ago (the replica comparison of `raftbus topics verify` and `raftbus cluster verify`).

Pure: no clock, no randomness, no I/O besides the transaction it is given.
"""
from __future__ import annotations

import bisect
import struct
from collections import deque
from itertools import repeat

from isal.isal_zlib import crc32  # zlib's CRC-32 (same values), computed with ISA-L's carry-less multiply

DIGEST_KEY = b"content-digest"
DIGEST_HISTORY_MAX = 4096  # applied commands whose digest a replica can still report
_MODULUS = 2**64
_DIGEST = struct.Struct(">Q")


_TABLE_SEEDS: dict[str, int] = {}


def _seed(table: str) -> int:
    seed = _TABLE_SEEDS.get(table)
    if seed is None:
        seed = _TABLE_SEEDS[table] = crc32(table.encode())
    return seed


def pair_term(table: str, key: bytes, value) -> int:
    return crc32(value, crc32(key, _seed(table)))


def _terms(seed: int, keys, values) -> int:
    """The sum of the terms of (key, value) pairs of one table; absent values (None) count nothing. (Hot: every
    applied queue and metadata command comes here for each pair it writes or deletes, so the CRCs run in `map`.)"""
    return _value_terms(list(map(crc32, keys, repeat(seed))), values)


def _value_terms(key_crcs: list, values) -> int:
    """`_terms` with each key's CRC already taken (`key_crcs`, in the same order as `values`); `values` None
    means every pair is absent."""
    if values is None:
        return 0
    if None in values:
        kept = [(key_crc, value) for key_crc, value in zip(key_crcs, values) if value is not None]
        key_crcs, values = [key_crc for key_crc, _ in kept], [value for _, value in kept]
    return sum(map(crc32, values, key_crcs))


def load(raw) -> int | None:
    return None if raw is None else _DIGEST.unpack(bytes(raw))[0]


def of_store(txn, tables, digest_table: str) -> int:
    """The content digest recomputed from every pair of `tables` as `txn` sees them."""
    total = 0
    for table in tables:
        for key, value in txn.items(table):
            key = bytes(key)
            if table == digest_table and key == DIGEST_KEY:
                continue
            total += pair_term(table, key, value)
    return total % _MODULUS


def kept_or_computed(txn, tables, digest_table: str) -> int:
    """The kept digest, or one computed now for a store written before digests were kept."""
    kept = load(txn.get(digest_table, DIGEST_KEY))
    return of_store(txn, tables, digest_table) if kept is None else kept


def consistent(txn, tables, digest_table: str) -> bool | None:
    """Whether the stored pairs add up to the kept digest; None when the store keeps none."""
    kept = load(txn.get(digest_table, DIGEST_KEY))
    return None if kept is None else kept == of_store(txn, tables, digest_table)


class DigestingTxn:
    """A write transaction that keeps the content digest in step with every put and delete; reads pass through."""

    def __init__(self, txn, digest: int, digest_table: str):
        self._txn = txn
        self.digest = digest
        self._digest_table = digest_table

    def __getattr__(self, name):
        return getattr(self._txn, name)

    def _replace(self, table: str, keys, olds, news) -> None:
        """Take the terms of `olds` out of the digest and put those of `news` in (values None for absent pairs;
        `news` None when every pair is deleted). Each key's CRC is taken once for both sides."""
        key_crcs = list(map(crc32, keys, repeat(_seed(table))))
        self.digest = (self.digest - _value_terms(key_crcs, olds) + _value_terms(key_crcs, news)) % _MODULUS

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._replace(table, (key,), (self._txn.get(table, key),), (value,))
        self._txn.put(table, key, value)

    def delete(self, table: str, key: bytes) -> bool:
        self._replace(table, (key,), (self._txn.get(table, key),), (None,))
        return self._txn.delete(table, key)

    def put_many(self, table: str, pairs) -> None:
        pairs = _bytes_keyed(pairs)
        keys = [k for k, _ in pairs]
        if len(set(keys)) == len(keys):
            self._replace(table, keys, self._txn.get_many(table, keys), [v for _, v in pairs])
        else:  # a key written twice in one call: each write replaces the one before
            for key, value in pairs:
                self._replace(table, (key,), (self._txn.get(table, key),), (value,))
                self._txn.put(table, key, value)
            return
        self._txn.put_many(table, pairs)

    def replace_read_many(self, table: str, pairs, olds) -> None:
        """put_many() of distinct keys whose current values the caller read in this transaction (`olds`, in the
        same order): their terms leave the digest without a second read."""
        pairs = _bytes_keyed(pairs)
        self._replace(table, [k for k, _ in pairs], olds, [v for _, v in pairs])
        self._txn.put_many(table, pairs)

    def delete_first_read(self, table: str, pairs) -> int:
        """delete_first() of the first len(pairs) pairs of `table`, which the caller read in this transaction
        (in key order): their terms leave the digest without a second read."""
        if not pairs:
            return 0
        pairs = _bytes_keyed(pairs)
        self._replace(table, [k for k, _ in pairs], [v for _, v in pairs], None)
        return self._txn.delete_first(table, len(pairs))

    def put_new_many(self, table: str, pairs) -> None:
        """put_many() of keys the table does not hold (the store refuses any it does): only the new pairs' terms
        are added, with no read of what they replace."""
        pairs = _bytes_keyed(pairs)
        if not pairs:
            return
        self.digest = (self.digest + _terms(_seed(table), [k for k, _ in pairs], [v for _, v in pairs])) % _MODULUS
        self._txn.put_new_many(table, pairs)

    def delete_many(self, table: str, keys) -> int:
        keys = list(dict.fromkeys(_bytes_keys(keys)))
        self._replace(table, keys, self._txn.get_many(table, keys), None)
        return self._txn.delete_many(table, keys)

    def pop_many(self, table: str, keys) -> list:
        """Delete `keys` and answer their values (None for absent ones); each removed pair leaves the digest."""
        keys = _bytes_keys(keys)
        values = self._txn.pop_many(table, keys)
        self._replace(table, keys, values, None)
        return values

    def delete_first(self, table: str, count: int) -> int:
        """Delete the first `count` pairs of `table` in key order; their terms leave the digest."""
        if count <= 0:
            return 0
        keys, values = [], []
        for key, value in self._txn.items(table):
            if len(keys) == count:
                break
            keys.append(bytes(key))
            values.append(bytes(value))
        self._replace(table, keys, values, None)
        return self._txn.delete_first(table, count)

    def finish(self) -> int:
        """Write the digest beside the command's writes (call last, inside the transaction)."""
        self._txn.put(self._digest_table, DIGEST_KEY, _DIGEST.pack(self.digest))
        return self.digest


def _bytes_keys(keys) -> list[bytes]:
    """Keys as bytes (hashable, and what the store and the CRCs take), one comprehension per batch."""
    return [k if type(k) is bytes else bytes(k) for k in keys]


def _bytes_keyed(pairs) -> list[tuple]:
    """(key, value) pairs with bytes keys, one comprehension per batch."""
    return [(k if type(k) is bytes else bytes(k), v) for k, v in pairs]


class DigestHistory:
    """The digest after each of the last `DIGEST_HISTORY_MAX` applied commands (the applying thread records,
    any thread asks)."""

    def __init__(self, index: int, digest: int, size_max: int = DIGEST_HISTORY_MAX):
        self._entries: deque[tuple[int, int]] = deque([(index, digest)], maxlen=size_max)

    def record(self, index: int, digest: int) -> None:
        self._entries.append((index, digest))

    def reset(self, index: int, digest: int) -> None:
        """After a snapshot install or a rebuild: the history before it no longer describes this store."""
        self._entries.clear()
        self._entries.append((index, digest))

    def at(self, index: int) -> int | None:
        """The digest once every command up to `index` was applied; None when `index` is older than the history
        or not applied yet."""
        entries = list(self._entries)
        if entries[0][0] > index or entries[-1][0] < index:
            return None
        position = bisect.bisect_right(entries, index, key=lambda entry: entry[0])
        return entries[position - 1][1]
