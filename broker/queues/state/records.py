"""How a queue partition stores a message and orders its indexes (pure byte layouts, no storage access).

A message (table `messages`, key seq >Q):
    state >B | priority >i | delivery_count >I | enqueued_ms >q | available_ms >q | deadline_ms >q | origin_id >Q |
    group_len >H | idempotency_key_len >H | last_error_len >H | group | idempotency_key | last_error | record
`record` is one record of client/records.py (timestamp, key, value, headers), opaque to the broker. This is
also the wire layout of a packed message (client/queues/codec.py), so a lease is answered with the stored rows.
Index keys sort so that LMDB order is delivery order:
    ready (priority ordering)  priority (sign-flipped >I) | seq >Q      lower priority first, then arrival
    ready (fair ordering)      group path (queue_fair) | priority | seq
    (a message's row key in `messages` is its ready key, in every state: see row_key)
    (ready values: enqueued_ms >q | group, for statistics without reading messages)
    delayed, in flight         time (sign-flipped >Q) | seq >Q           earliest first
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from raftbus.client.queues.codec import MESSAGE_HEADER

READY, DELAYED, IN_FLIGHT, DEAD = 1, 2, 3, 4
STATE_NAMES = {READY: "ready", DELAYED: "delayed", IN_FLIGHT: "in_flight", DEAD: "dead"}

_MESSAGE = MESSAGE_HEADER
_LEASE_HEAD = struct.Struct(">BiIqqq")   # the leading fields a lease rewrites in place
_LEASE_READ = struct.Struct(">BiIqqq8xH")  # ... and group_len, read with them
_ACK_READ = struct.Struct(">B4xI32xH")    # state, delivery_count and group_len: what an ack checks
_GROUP_AT = _MESSAGE.size                # the group follows the header
_READY_VALUE = struct.Struct(">q")       # a ready index value: enqueued_ms, then the group
_SEQ = struct.Struct(">Q")
_TIME_SEQ = struct.Struct(">QQ")
_PRIORITY_SEQ = struct.Struct(">IQ")
SEQ_MAX = 2**64 - 1


class StoredMessage(NamedTuple):
    state: int
    priority: int
    delivery_count: int
    enqueued_ms: int
    available_ms: int        # delayed: when it becomes ready; ready: since when
    deadline_ms: int         # in flight: when the lease expires
    origin_id: int           # 0, or the message id it was moved from (dead-letter move, redrive)
    group: bytes
    idempotency_key: bytes
    last_error: bytes
    record: bytes

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state]


def encode_message(m: StoredMessage) -> bytes:
    return b"".join((
        _MESSAGE.pack(m.state, m.priority, m.delivery_count, m.enqueued_ms, m.available_ms, m.deadline_ms, m.origin_id,
                      len(m.group), len(m.idempotency_key), len(m.last_error)),
        m.group, m.idempotency_key, m.last_error, m.record))


def new_row(state: int, priority: int, delivery_count: int, enqueued_ms: int, available_ms: int, origin_id: int,
            group: bytes, idempotency_key: bytes, last_error: bytes, record: bytes) -> bytes:
    """encode_message of a message not in flight, from its fields (the enqueue hot path)."""
    return b"".join((
        _MESSAGE.pack(state, priority, delivery_count, enqueued_ms, available_ms, 0, origin_id, len(group),
                      len(idempotency_key), len(last_error)),
        group, idempotency_key, last_error, record))


def decode_message(raw) -> StoredMessage:
    raw = bytes(raw)
    (state, priority, delivery_count, enqueued_ms, available_ms, deadline_ms, origin_id, group_len, key_len,
     error_len) = _MESSAGE.unpack_from(raw)
    position = _MESSAGE.size
    group = raw[position:position + group_len]
    position += group_len
    key = raw[position:position + key_len]
    position += key_len
    error = raw[position:position + error_len]
    return StoredMessage(state, priority, delivery_count, enqueued_ms, available_ms, deadline_ms, origin_id, group,
                         key, error, raw[position + error_len:])


def leased_rows(raws: list, deadline_ms: int, max_bytes: int) -> tuple[list[bytes], list[bytes]]:
    """The lease hot path, without decoding: the first stored messages of `raws` whose records fit in max_bytes
    (at least one), each with its leading fields rewritten (IN_FLIGHT, one more delivery, the deadline); and
    their groups. One unpack per message reads what both need."""
    if sum(map(len, raws)) > max_bytes:  # whole rows fit: so do their records, no need to size each one
        raws = raws[:_fitting(raws, max_bytes)]
    unpack, pack, head = _LEASE_READ.unpack_from, _LEASE_HEAD.pack, _LEASE_HEAD.size
    rows, groups = [], []
    add_row, add_group = rows.append, groups.append
    for raw in raws:
        _, priority, count, enqueued, available, _, group_len = unpack(raw)
        add_row(pack(IN_FLIGHT, priority, count + 1, enqueued, available, deadline_ms) + raw[head:])
        add_group(raw[_GROUP_AT:_GROUP_AT + group_len] if group_len else b"")
    return rows, groups


def _fitting(raws: list, max_bytes: int) -> int:
    """How many of the first messages have records that fit in max_bytes together (at least one)."""
    size = 0
    for taken, raw in enumerate(raws):
        size += record_bytes(raw)
        if taken and size > max_bytes:
            return taken
    return len(raws)


def record_bytes(raw) -> int:
    """The size of a stored message's record."""
    _, _, _, _, _, _, _, group_len, key_len, error_len = _MESSAGE.unpack_from(raw)
    return len(raw) - _MESSAGE.size - group_len - key_len - error_len


def leased_groups(raws: list, delivery_counts) -> list[bytes] | None:
    """The ack hot path: the group of each stored message when every one is in flight at its delivery count;
    None as soon as one is absent (None) or is not."""
    unpack = _ACK_READ.unpack_from
    groups = []
    add_group = groups.append
    for raw, delivery_count in zip(raws, delivery_counts):
        if raw is None:
            return None
        state, stored_count, group_len = unpack(raw)
        if state != IN_FLIGHT or stored_count != delivery_count:
            return None
        add_group(raw[_GROUP_AT:_GROUP_AT + group_len] if group_len else b"")
    return groups


def ready_value(enqueued_ms: int, group: bytes) -> bytes:
    return _READY_VALUE.pack(enqueued_ms) + group


def read_ready_value(value) -> tuple[int, bytes]:
    """(enqueued_ms, group) of a ready index value."""
    return _READY_VALUE.unpack_from(value)[0], bytes(value[_READY_VALUE.size:])


def seq_key(seq: int) -> bytes:
    return _SEQ.pack(seq)


def seq_of(key: bytes) -> int:
    """The seq at the end of any index key."""
    return _SEQ.unpack_from(key, len(key) - _SEQ.size)[0]


def time_key(time_ms: int, seq: int = 0) -> bytes:
    """Sign-flipped so negative times sort first."""
    return _TIME_SEQ.pack(time_ms + 2**63, seq)


def time_of(key: bytes) -> int:
    return _TIME_SEQ.unpack_from(key)[0] - 2**63


def due_bound(now_ms: int) -> bytes:
    """Keys <= this bound have a time <= now_ms."""
    return time_key(now_ms, SEQ_MAX)


def priority_key(priority: int, seq: int) -> bytes:
    return _PRIORITY_SEQ.pack(priority + 2**31, seq)


def row_key(seq: int, priority: int, group_path: bytes | None) -> bytes:
    """Where a message is stored, and its ready index key: priority|seq, after its group path when the
    partition has fair ordering (group_path None: priority ordering)."""
    key = _PRIORITY_SEQ.pack(priority + 2**31, seq)
    return key if group_path is None else group_path + key
