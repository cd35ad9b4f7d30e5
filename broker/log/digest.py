"""Checksums over what a stream partition has applied: a digest of its stored batches, kept with them.

The digest is the sum, modulo 2**64, of a CRC-32 per stored batch (over its offset key and stored value), so an
append adds one term and retention subtracts the terms of the batches it removes: it always describes exactly
the batches in the store, and is updated in the same transaction as they are. Two uses:
- self-check: recomputing it from the stored batches and comparing with the kept value finds bit rot or a
  store changed behind the state machine's back (`store_consistent`);
- replica comparison: a `checkpoint` command records (index, log start, high watermark, digest) on every
  replica at the same log index, so replicas compare equal exactly when they applied the same log the same way.

A store written before digests existed keeps none (`None`: untracked) until it holds no batch.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from isal.isal_zlib import crc32  # zlib's CRC-32 (same values), computed with ISA-L's carry-less multiply

DIGEST_KEY = b"digest"
CHECKPOINT_KEY = b"checkpoint"
_MODULUS = 2**64
_DIGEST = struct.Struct(">Q")
_CHECKPOINT = struct.Struct(">qqqQ?")  # index, log_start_offset, high_watermark, digest, tracked


class Checkpoint(NamedTuple):
    index: int
    log_start_offset: int
    high_watermark: int
    digest: int | None


def batch_term(key: bytes, value) -> int:
    return crc32(value, crc32(key))


def add(digest: int | None, term: int) -> int | None:
    return None if digest is None else (digest + term) % _MODULUS


def remove(digest: int | None, term: int) -> int | None:
    return None if digest is None else (digest - term) % _MODULUS


def load(raw) -> int | None:
    return None if raw is None else _DIGEST.unpack(bytes(raw))[0]


def dump(digest: int) -> bytes:
    return _DIGEST.pack(digest)


def of_batches(items) -> int:
    """The digest of (key, value) stored batches, recomputed."""
    total = 0
    for key, value in items:
        total = (total + batch_term(bytes(key), value)) % _MODULUS
    return total


def dump_checkpoint(checkpoint: Checkpoint) -> bytes:
    tracked = checkpoint.digest is not None
    return _CHECKPOINT.pack(checkpoint.index, checkpoint.log_start_offset, checkpoint.high_watermark,
                            checkpoint.digest if tracked else 0, tracked)


def load_checkpoint(raw) -> Checkpoint | None:
    if raw is None:
        return None
    index, log_start, high_watermark, digest, tracked = _CHECKPOINT.unpack(bytes(raw))
    return Checkpoint(index, log_start, high_watermark, digest if tracked else None)
