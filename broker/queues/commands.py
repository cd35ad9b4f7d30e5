"""The replicated command codec of queue partitions: compact binary, stamped by the leader.

Every queue command starts with the same header, so each one can first run the partition's due work (expired
leases, due delayed messages, expired idempotency keys) from the leader's stamped time and the topic's policy:
    b"Q" | op (1 byte) | now_ms >q | policy (_POLICY)
or, in a new leader's grace (broker/clock.py, Stamp), with the leases it keeps: those whose deadline is after
kept_after_ms and at or before kept_until_ms do not expire with this command:
    b"q" | op (1 byte) | now_ms >q | kept_after_ms >q | kept_until_ms >q | policy (_POLICY)
then the op's body:
    ENQUEUE  b"E"  producer_id_len >B | producer_id | base_sequence >q | count >I | items
                   item: _ITEM | group | idempotency_key | last_error | record (one record of client/records.py)
    ENQUEUE_RUNS b"e"  the body of ENQUEUE; the partition may store the batch's plain messages as runs
                   (state/runs.py). A broker from before runs refuses the op (not a queue command)
    LEASE    b"L"  max_messages >I | max_bytes >I | visibility_ms >q
    ACK      b"A"  settler | count >I | (seq >Q, delivery_count >I) * count
    NACK     b"N"  settler | count >I | (seq >Q, delivery_count >I, delay_ms >q (-1: backoff), reason_len >H,
                   reason) * count
                   settler = settler_id_len >B | settler_id | sequence >q: a consumer's id and its batch number
                   on this partition, so a retried batch answers as the first attempt did
    EXTEND   b"X"  count >I | (seq >Q, delivery_count >I, visibility_ms >q) * count
    DELETE   b"D"  count >I | seq >Q * count
    CHANGE   b"C"  seq >Q | flags >B (1: priority, 2: deliver_at_ms) | priority >i | deliver_at_ms >q
    TICK     b"K"  (nothing: only the due work)
    DEAD_REMOVE b"R" count >I | seq >Q * count   (dead-lettered messages now held by the dead-letter topic)
Sequences (`seq`) are per partition; message ids (client/queues/ids.py) carry the partition as well.
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from raftbus.broker.clock import Stamp
from raftbus.client import errors

ENQUEUE, LEASE, ACK, NACK, EXTEND, DELETE, CHANGE, TICK, DEAD_REMOVE = (
    "enqueue", "lease", "ack", "nack", "extend", "delete", "change", "tick", "dead_remove")
ENQUEUE_RUNS = "enqueue_runs"
BACKOFF = -1  # NACK delay_ms: use the topic's exponential backoff
CHANGE_PRIORITY, CHANGE_DELIVER_AT = 1, 2
PRODUCER_ID_BYTES_MAX = 255
GROUP_SEPARATOR = ord(".")

_HEADER = struct.Struct(">ccq")
_HEADER_KEPT = struct.Struct(">ccqqq")  # b"q": with the leases a new leader's grace keeps
_POLICY = struct.Struct(">IqqIqqI")
_PRODUCER = struct.Struct(">qI")
_ITEM = struct.Struct(">iqIqQHHHI")
_LEASE = struct.Struct(">IIq")
_COUNT = struct.Struct(">I")
_ACK = struct.Struct(">QI")
_NACK = struct.Struct(">QIqH")
_EXTEND = struct.Struct(">QIq")
_SEQ = struct.Struct(">Q")
_SEQUENCE = struct.Struct(">q")
_CHANGE = struct.Struct(">QBiq")
_OPS = {b"E": ENQUEUE, b"e": ENQUEUE_RUNS, b"L": LEASE, b"A": ACK, b"N": NACK, b"X": EXTEND, b"D": DELETE, b"C": CHANGE,
        b"K": TICK, b"R": DEAD_REMOVE}
_CODES = {name: code for code, name in _OPS.items()}


class QueuePolicy(NamedTuple):
    """The topic's rules as the leader saw them, carried in every command (state machines read no metadata)."""

    max_deliveries: int = 5               # 0 = never dead-letter
    backoff_base_ms: int = 1000
    backoff_max_ms: int = 300_000
    max_in_flight_per_group: int = 0      # 0 = unlimited (fair ordering only)
    idempotency_window_ms: int = 86_400_000
    producer_idle_ms: int = 7 * 86_400_000
    due_per_command_max: int = 10_000     # expired leases / due messages / expired keys handled per command


class EnqueueItem(NamedTuple):
    priority: int
    deliver_at_ms: int            # 0 or <= now: ready at once
    delivery_count: int           # history carried by dead-letter moves (0 for new messages)
    enqueued_ms: int              # 0: now; else the original enqueue time (moves keep it)
    origin_id: int                # 0, or the id this message was moved from (dead-letter move, redrive)
    group: bytes
    idempotency_key: bytes
    last_error: bytes
    record: bytes


class Enqueue(NamedTuple):
    producer_id: bytes
    base_sequence: int
    items: tuple[EnqueueItem, ...]


class Lease(NamedTuple):
    max_messages: int
    max_bytes: int
    visibility_ms: int


class Settle(NamedTuple):
    """An ack or nack batch; `settler_id` (empty: none) and `sequence` identify it for retries."""

    settler_id: bytes
    sequence: int
    items: list


class PackedLeases(Sequence):
    """The (seq, delivery_count) pairs of an ack, kept in the command's layout (seq >Q | delivery_count >I each):
    the hot path reads every seq key and every count with one unpack (seq_keys_and_counts)."""

    __slots__ = ("packed",)

    def __init__(self, packed: bytes):
        self.packed = packed

    def __len__(self) -> int:
        return len(self.packed) // _ACK.size

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return _ACK.unpack_from(self.packed, index % len(self) * _ACK.size)

    def __iter__(self):
        return _ACK.iter_unpack(self.packed)

    def __eq__(self, other) -> bool:
        return isinstance(other, (list, tuple, PackedLeases)) and list(self) == list(other)

    __hash__ = None

    def seq_keys_and_counts(self) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
        """(the seqs as 8-byte big-endian keys, the delivery counts), in order."""
        fields = struct.unpack(">" + "8sI" * len(self), self.packed)
        return fields[0::2], fields[1::2]

    def seqs(self) -> tuple[int, ...]:
        """The seqs, in order."""
        return struct.unpack(">" + "Q4x" * len(self), self.packed)


class Nack(NamedTuple):
    seq: int
    delivery_count: int
    delay_ms: int
    reason: bytes


class Change(NamedTuple):
    seq: int
    priority: int | None
    deliver_at_ms: int | None


class QueueCommand(NamedTuple):
    op: str
    now_ms: int
    policy: QueuePolicy
    body: object
    kept_leases: tuple[int, int] | None = None  # (after, until]: deadlines of leases kept by a new leader's grace


# ---------------------------------------------------------------------- encoding
# Every encode_* takes the leader's stamp: a Stamp, or a plain now_ms (the cutoff is then now_ms).
def _header(op: str, now: int | Stamp, policy: QueuePolicy) -> bytes:
    if isinstance(now, Stamp):
        kept = now.kept_leases
        if kept is not None:
            return _HEADER_KEPT.pack(b"q", _CODES[op], now.now_ms, *kept) + _POLICY.pack(*policy)
        now = now.now_ms
    return _HEADER.pack(b"Q", _CODES[op], now) + _POLICY.pack(*policy)


def encode_enqueue(now_ms: int | Stamp, policy: QueuePolicy, items, *, producer_id: bytes = b"",
                   base_sequence: int = 0, runs: bool = False) -> bytes:
    """runs: ENQUEUE_RUNS, which a priority-ordered partition may store as runs (state/runs.py)."""
    if len(producer_id) > PRODUCER_ID_BYTES_MAX:
        raise errors.InvalidArgument(f"producer_id is longer than {PRODUCER_ID_BYTES_MAX} bytes")
    parts = [_header(ENQUEUE_RUNS if runs else ENQUEUE, now_ms, policy), bytes((len(producer_id),)), producer_id,
             _PRODUCER.pack(base_sequence, len(items))]
    for item in items:
        parts.append(_ITEM.pack(item.priority, item.deliver_at_ms, item.delivery_count, item.enqueued_ms,
                                item.origin_id, len(item.group), len(item.idempotency_key), len(item.last_error),
                                len(item.record)))
        parts += (item.group, item.idempotency_key, item.last_error, item.record)
    return b"".join(parts)


def encode_lease(now_ms: int | Stamp, policy: QueuePolicy, max_messages: int, max_bytes: int, visibility_ms: int) -> bytes:
    return _header(LEASE, now_ms, policy) + _LEASE.pack(max_messages, max_bytes, visibility_ms)


def _settler(settler_id: bytes, sequence: int) -> bytes:
    if len(settler_id) > PRODUCER_ID_BYTES_MAX:
        raise errors.InvalidArgument(f"settler_id is longer than {PRODUCER_ID_BYTES_MAX} bytes")
    return bytes((len(settler_id),)) + settler_id + _SEQUENCE.pack(sequence)


def encode_ack(now_ms: int | Stamp, policy: QueuePolicy, leases, *, settler_id: bytes = b"", sequence: int = 0) -> bytes:
    """leases: (seq, delivery_count) pairs."""
    return encode_ack_packed(now_ms, policy, b"".join([_ACK.pack(*pair) for pair in leases]), settler_id=settler_id,
                             sequence=sequence)


def encode_ack_packed(now_ms: int | Stamp, policy: QueuePolicy, packed_leases: bytes, *, settler_id: bytes = b"",
                      sequence: int = 0) -> bytes:
    """packed_leases: (seq >Q, delivery_count >I) per lease, the body's own layout (copied, not re-encoded)."""
    if len(packed_leases) % _ACK.size:
        raise errors.InvalidArgument(f"packed leases of {len(packed_leases)} bytes are not whole")
    return b"".join([_header(ACK, now_ms, policy), _settler(settler_id, sequence),
                     _COUNT.pack(len(packed_leases) // _ACK.size), packed_leases])


def encode_nack(now_ms: int | Stamp, policy: QueuePolicy, nacks, *, settler_id: bytes = b"", sequence: int = 0) -> bytes:
    """nacks: Nack tuples (delay_ms BACKOFF for the topic's backoff)."""
    parts = [_header(NACK, now_ms, policy), _settler(settler_id, sequence), _COUNT.pack(len(nacks))]
    for nack in nacks:
        parts += (_NACK.pack(nack.seq, nack.delivery_count, nack.delay_ms, len(nack.reason)), nack.reason)
    return b"".join(parts)


def encode_extend(now_ms: int | Stamp, policy: QueuePolicy, extensions) -> bytes:
    """extensions: (seq, delivery_count, visibility_ms) triples."""
    return b"".join([_header(EXTEND, now_ms, policy), _COUNT.pack(len(extensions)),
                     *(_EXTEND.pack(*triple) for triple in extensions)])


def encode_delete(now_ms: int | Stamp, policy: QueuePolicy, seqs) -> bytes:
    return b"".join([_header(DELETE, now_ms, policy), _COUNT.pack(len(seqs)), *(_SEQ.pack(s) for s in seqs)])


def encode_dead_remove(now_ms: int | Stamp, policy: QueuePolicy, seqs) -> bytes:
    return b"".join([_header(DEAD_REMOVE, now_ms, policy), _COUNT.pack(len(seqs)), *(_SEQ.pack(s) for s in seqs)])


def encode_change(now_ms: int | Stamp, policy: QueuePolicy, seq: int, priority: int | None,
                  deliver_at_ms: int | None) -> bytes:
    flags = (CHANGE_PRIORITY if priority is not None else 0) | (CHANGE_DELIVER_AT if deliver_at_ms is not None else 0)
    return _header(CHANGE, now_ms, policy) + _CHANGE.pack(seq, flags, priority or 0, deliver_at_ms or 0)


def encode_tick(now_ms: int | Stamp, policy: QueuePolicy) -> bytes:
    return _header(TICK, now_ms, policy)


# ---------------------------------------------------------------------- decoding
def decode(command) -> QueueCommand:
    """The command; InvalidArgument (or CorruptBatch) when malformed. Never anything else."""
    view = memoryview(command)
    kept = None
    try:
        if view[:1] == b"q":
            magic, code, now_ms, *kept = _HEADER_KEPT.unpack_from(view)
            kept, header = tuple(kept), _HEADER_KEPT.size
        else:
            magic, code, now_ms = _HEADER.unpack_from(view)
            header = _HEADER.size
        policy = QueuePolicy(*_POLICY.unpack_from(view, header))
    except struct.error:
        raise errors.InvalidArgument(f"queue command of {len(view)} bytes is truncated") from None
    op = _OPS.get(code)
    if magic not in (b"Q", b"q") or op is None:
        raise errors.InvalidArgument("not a queue command")
    body = view[header + _POLICY.size:]
    try:
        return QueueCommand(op, now_ms, policy, _BODIES[op](body), kept)
    except (struct.error, IndexError, ValueError):
        raise errors.InvalidArgument(f"{op} command of {len(view)} bytes is truncated or garbled") from None


def _counted(body, item: struct.Struct) -> list[tuple]:
    (count,) = _COUNT.unpack_from(body)
    if len(body) != _COUNT.size + count * item.size:
        raise ValueError("count does not match the body")
    return list(item.iter_unpack(body[_COUNT.size:]))


def _packed_leases(body) -> PackedLeases:
    (count,) = _COUNT.unpack_from(body)
    if len(body) != _COUNT.size + count * _ACK.size:
        raise ValueError("count does not match the body")
    return PackedLeases(bytes(body[_COUNT.size:]))


def _take(body, position: int, length: int) -> tuple[bytes, int]:
    end = position + length
    if end > len(body):
        raise ValueError("field runs past the end")
    return bytes(body[position:end]), end


def _decode_enqueue(body) -> Enqueue:
    body = bytes(body)  # one copy: each field below is then a single slice
    size = len(body)
    id_end = 1 + body[0]
    producer_id = body[1:id_end]
    base_sequence, count = _PRODUCER.unpack_from(body, id_end)
    position = id_end + _PRODUCER.size
    unpack, item_size = _ITEM.unpack_from, _ITEM.size
    items = []
    for _ in range(count):
        (priority, deliver_at_ms, delivery_count, enqueued_ms, origin_id, group_len, key_len, error_len,
         record_len) = unpack(body, position)
        group_end = position + item_size + group_len
        key_end = group_end + key_len
        error_end = key_end + error_len
        end = error_end + record_len
        if end > size:
            raise ValueError("field runs past the end")
        group = body[position + item_size:group_end]
        if group:
            check_group(group)
        items.append(EnqueueItem(priority, deliver_at_ms, delivery_count, enqueued_ms, origin_id, group,
                                 body[group_end:key_end], body[key_end:error_end], body[error_end:end]))
        position = end
    if position != size or not items or base_sequence < 0:
        raise errors.CorruptBatch("enqueue command has trailing bytes, no messages or a negative sequence")
    return Enqueue(producer_id, base_sequence, tuple(items))


def _decode_settle(body, decode_items) -> Settle:
    id_end = 1 + body[0]
    (sequence,) = _SEQUENCE.unpack_from(body, id_end)
    return Settle(bytes(body[1:id_end]), sequence, decode_items(body[id_end + _SEQUENCE.size:]))


def _decode_nacks(body) -> list[Nack]:
    (count,) = _COUNT.unpack_from(body)
    position = _COUNT.size
    nacks = []
    for _ in range(count):
        seq, delivery_count, delay_ms, reason_len = _NACK.unpack_from(body, position)
        reason, position = _take(body, position + _NACK.size, reason_len)
        nacks.append(Nack(seq, delivery_count, delay_ms, reason))
    if position != len(body):
        raise ValueError("trailing bytes")
    return nacks


def _decode_change(body) -> Change:
    if len(body) != _CHANGE.size:
        raise ValueError("change body size")
    seq, flags, priority, deliver_at_ms = _CHANGE.unpack_from(body)
    return Change(seq, priority if flags & CHANGE_PRIORITY else None,
                  deliver_at_ms if flags & CHANGE_DELIVER_AT else None)


def _decode_lease(body) -> Lease:
    if len(body) != _LEASE.size:
        raise ValueError("lease body size")
    return Lease(*_LEASE.unpack_from(body))


def _decode_tick(body) -> None:
    if len(body):
        raise ValueError("tick has no body")


_BODIES = {
    ENQUEUE: _decode_enqueue,
    ENQUEUE_RUNS: _decode_enqueue,
    LEASE: _decode_lease,
    ACK: lambda body: _decode_settle(body, _packed_leases),
    NACK: lambda body: _decode_settle(body, _decode_nacks),
    EXTEND: lambda body: _counted(body, _EXTEND),
    DELETE: lambda body: [seq for (seq,) in _counted(body, _SEQ)],
    DEAD_REMOVE: lambda body: [seq for (seq,) in _counted(body, _SEQ)],
    CHANGE: _decode_change,
    TICK: _decode_tick,
}


def check_group(group: bytes) -> None:
    """InvalidArgument unless group is empty or dot-separated non-empty parts without control characters."""
    if not group:
        return
    if min(group) < 0x20 or group[0] == GROUP_SEPARATOR or group[-1] == GROUP_SEPARATOR or b".." in group:
        raise errors.InvalidArgument(f"group {group!r} needs non-empty dot-separated parts without control "
                                     "characters")
