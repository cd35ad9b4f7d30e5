"""Kafka's murmur2 hash and key partitioner, bit for bit (same partition for a key as Kafka's DefaultPartitioner).

The hash reads the key's 4-byte words in one `struct` call and keeps the loop on local names; `KeyHashes`
remembers the hashes of recently seen keys, so a producer whose keys repeat (user or order ids) hashes each once.
"""
from __future__ import annotations

import struct

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_WORDS = [struct.Struct(f"<{n}I") for n in range(64)]  # unpackers for keys of up to 255 bytes


def murmur2(data: bytes) -> int:
    """The 32-bit murmur2 of `data` as Kafka computes it (a signed Java int)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    words = length >> 2
    m, mask = _M, _MASK
    for k in (_WORDS[words] if words < 64 else struct.Struct(f"<{words}I")).unpack_from(data):
        k = (k * m) & mask
        k ^= k >> 24
        h = ((h * m) & mask) ^ ((k * m) & mask)
    tail = words << 2
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's DefaultPartitioner picks for `key` among `partitions`."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class KeyHashes:
    """The positive murmur2 (sign bit masked, as Kafka's partitioner uses it) of up to `entries_max` keys seen
    lately; forgotten all at once when full. Not thread-safe: its owner holds a lock around it."""

    def __init__(self, entries_max: int):
        self.entries_max = entries_max
        self._hashes: dict[bytes, int] = {}

    def partition(self, key: bytes, partitions: int) -> int:
        """partition_for_key(key, partitions), hashing `key` only if it is not remembered."""
        h = self._hashes.get(key)
        if h is None:
            if len(self._hashes) >= self.entries_max:
                self._hashes.clear()
            h = self._hashes[key] = murmur2(key) & 0x7FFFFFFF
        return h % partitions
