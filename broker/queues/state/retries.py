"""Answers a queue partition remembers for retries, so a request repeated after a lost answer changes nothing.

An idempotent producer's last PRODUCER_BATCHES_MAX enqueue batches (base sequence, count, first new seq and the
messages that were idempotency-key duplicates) and a consumer's last ack or nack batch (its sequence and which
messages were refused). Both are forgotten once idle for the policy's producer_idle_ms (an expiry index each).
"""
from __future__ import annotations

import struct

from raftbus.client import errors

from raftbus.broker.queues import commands as queue_commands
from raftbus.broker.queues.state.tables import (
    EXPIRES,
    PRODUCER_EXPIRY,
    PRODUCERS,
    SETTLER_EXPIRY,
    SETTLERS,
    Enqueued,
    time8,
)

PRODUCER_BATCHES_MAX = 5
_BATCH = struct.Struct(">qIQI")       # base_sequence, count, first new seq, duplicates
_DUPLICATE = struct.Struct(">IQ")     # index in the batch, seq it duplicated
_BLOB_LEN = struct.Struct(">I")
_SETTLED = struct.Struct(">qqI")      # expires_ms, sequence, count
_FAILURE = struct.Struct(">IB")       # index in the batch, refusal code
_REFUSALS = {1: errors.UnknownMessage, 2: errors.LeaseLost}
_REFUSAL_CODES = {cls: code for code, cls in _REFUSALS.items()}


# ---------------------------------------------------------------------- producers
def producer_batches(txn, producer_id: bytes) -> list[bytes]:
    """The remembered batch records of a producer (newest last)."""
    raw = txn.get(PRODUCERS, producer_id)
    if raw is None:
        return []
    raw = bytes(raw)
    batches, position = [], EXPIRES.size
    while position < len(raw):
        (length,) = _BLOB_LEN.unpack_from(raw, position)
        position += _BLOB_LEN.size
        batches.append(raw[position:position + length])
        position += length
    return batches


def check_sequence(remembered: list[bytes], body: queue_commands.Enqueue):
    """None to enqueue; the original results of a retried batch; OutOfOrderSequence for a gap or an old one."""
    if not remembered:
        return None
    for batch in remembered:
        base_sequence, count, first_seq, duplicates = _BATCH.unpack_from(batch)
        if base_sequence == body.base_sequence and count == len(body.items):
            return _replayed_batch(batch, count, first_seq, duplicates)
    base_sequence, count, _, _ = _BATCH.unpack_from(remembered[-1])
    if body.base_sequence == base_sequence + count:
        return None
    return errors.OutOfOrderSequence(
        f"enqueue batch with base_sequence {body.base_sequence} ({len(body.items)} messages) does not follow the "
        f"last one; expected {base_sequence + count}")


def _replayed_batch(batch: bytes, count: int, first_seq: int, duplicates: int) -> tuple[Enqueued, ...]:
    known = dict(_DUPLICATE.iter_unpack(batch[_BATCH.size:_BATCH.size + duplicates * _DUPLICATE.size]))
    results, next_new = [], first_seq
    for i in range(count):
        if i in known:
            results.append(Enqueued(known[i], True))
        else:
            results.append(Enqueued(next_new, True))
            next_new += 1
    return tuple(results)


def remember_batch(txn, body: queue_commands.Enqueue, remembered: list[bytes], first_seq: int, results, expires_ms: int) -> None:
    duplicates = [(i, r.seq) for i, r in enumerate(results) if r.duplicate]
    batch = _BATCH.pack(body.base_sequence, len(results), first_seq, len(duplicates)) + b"".join(
        _DUPLICATE.pack(*d) for d in duplicates)
    kept = (list(remembered) + [batch])[-PRODUCER_BATCHES_MAX:]
    _renew_expiry(txn, PRODUCER_EXPIRY, body.producer_id, txn.get(PRODUCERS, body.producer_id), expires_ms)
    txn.put(PRODUCERS, body.producer_id, EXPIRES.pack(expires_ms) + b"".join(
        _BLOB_LEN.pack(len(b)) + b for b in kept))


def _renew_expiry(txn, expiry_table: str, owner: bytes, old, expires_ms: int) -> None:
    if old is not None:
        txn.delete(expiry_table, time8(EXPIRES.unpack_from(old)[0]) + owner)
    txn.put(expiry_table, time8(expires_ms) + owner, b"")


# ---------------------------------------------------------------------- settlers (ack and nack batches)
def settled_before(txn, body: queue_commands.Settle) -> list | None:
    """The answers given to this very batch (same settler, sequence and size) when first applied, or None."""
    if not body.settler_id:
        return None
    old = txn.get(SETTLERS, body.settler_id)
    if old is None:
        return None
    old = bytes(old)
    _, sequence, count = _SETTLED.unpack_from(old)
    if sequence != body.sequence or count != len(body.items):
        return None
    answers: list = [None] * count
    for index, code in _FAILURE.iter_unpack(old[_SETTLED.size:]):
        answers[index] = _REFUSALS[code]("refused when this batch was first applied (this is a retry)")
    return answers


def remember_settled(txn, body: queue_commands.Settle, results: list, expires_ms: int) -> None:
    if not body.settler_id:
        return
    _renew_expiry(txn, SETTLER_EXPIRY, body.settler_id, txn.get(SETTLERS, body.settler_id), expires_ms)
    failures = b"".join(_FAILURE.pack(i, _REFUSAL_CODES[type(r)]) for i, r in enumerate(results) if r) if any(
        results) else b""
    txn.put(SETTLERS, body.settler_id, _SETTLED.pack(expires_ms, body.sequence, len(results)) + failures)
