"""Packed queue batches on the wire: leased messages and lease references as one bytes field per batch.

The layouts are specified in proto/queues.proto ("Packed batches"):
    packed messages   per message  message_id >Q | length >I | message
                      message = state >B | priority >i | delivery_count >I | enqueued_ms >q | available_ms >q |
                      lease_deadline_ms >q | origin_id >Q | group_len >H | idempotency_key_len >H |
                      last_error_len >H | group | idempotency_key | last_error | record
    packed leases     per lease    message_id >Q | delivery_count >I
A queue partition stores each message in the same `message` layout (broker/queues/state/records.py), so a
leader answers a lease by framing the stored rows, and a client decodes only the fields it reads.
"""
from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from raftbus.client.errors import InvalidArgument

MESSAGE_HEADER = struct.Struct(">BiIqqqQHHH")
ENTRY = struct.Struct(">QI")       # message_id, length of the message that follows
LEASE_REF = struct.Struct(">QI")   # message_id, delivery_count
STATE_NAMES = {1: "ready", 2: "delayed", 3: "in_flight", 4: "dead"}
_DELIVERY_COUNT = struct.Struct(">I")
_DELIVERY_COUNT_AT = 5             # offset of delivery_count in a message
_PRIORITY = struct.Struct(">i")
_PRIORITY_AT = 1
_ENTRY_HEAD = struct.Struct(">QIBiI")  # an entry's id and length, then the message's state, priority, count


class MessageFields(NamedTuple):
    """Every field of a packed message (strings still UTF-8 bytes)."""

    state: int
    priority: int
    delivery_count: int
    enqueued_ms: int
    available_ms: int
    lease_deadline_ms: int
    origin_id: int
    group: bytes
    idempotency_key: bytes
    last_error: bytes
    record: bytes


# ---------------------------------------------------------------------- packed messages
def pack_messages(entries: Iterable[tuple[int, bytes]]) -> bytes:
    """(message_id, message) pairs, framed back to back."""
    parts = []
    for mid, message in entries:
        parts += (ENTRY.pack(mid, len(message)), message)
    return b"".join(parts)


def iter_messages(packed: bytes) -> Iterator[tuple[int, memoryview]]:
    """(message_id, message) of each packed message, without copying; InvalidArgument when malformed."""
    view = memoryview(packed)
    position, end = 0, len(view)
    while position < end:
        if position + ENTRY.size > end:
            raise InvalidArgument("packed messages end inside an entry header")
        mid, length = ENTRY.unpack_from(view, position)
        position += ENTRY.size
        if length < MESSAGE_HEADER.size or position + length > end:
            raise InvalidArgument("packed message of a wrong length")
        yield mid, view[position:position + length]
        position += length


def message_fields(message) -> MessageFields:
    """Decode one packed message; InvalidArgument when its lengths do not fit."""
    (state, priority, delivery_count, enqueued_ms, available_ms, deadline_ms, origin_id, group_len, key_len,
     error_len) = MESSAGE_HEADER.unpack_from(message)
    position = MESSAGE_HEADER.size
    if position + group_len + key_len + error_len > len(message):
        raise InvalidArgument("packed message fields run past its end")
    group = bytes(message[position:position + group_len])
    position += group_len
    key = bytes(message[position:position + key_len])
    position += key_len
    error = bytes(message[position:position + error_len])
    return MessageFields(state, priority, delivery_count, enqueued_ms, available_ms, deadline_ms, origin_id, group,
                         key, error, bytes(message[position + error_len:]))


def delivery_count_of(message) -> int:
    return _DELIVERY_COUNT.unpack_from(message, _DELIVERY_COUNT_AT)[0]


def priority_of(message) -> int:
    return _PRIORITY.unpack_from(message, _PRIORITY_AT)[0]


def lease_refs_of(packed: bytes) -> bytes:
    """The packed leases that name every message of a packed lease answer (to ack them all)."""
    return pack_leases((mid, count) for mid, _, count in lease_heads(packed))


def lease_heads(packed: bytes) -> list[tuple[int, int, int]]:
    """(message_id, priority, delivery_count) of each packed message: what a worker needs to ack them and to
    order them, read with one unpack per message. InvalidArgument when malformed."""
    heads, position, end = [], 0, len(packed)
    unpack, header = _ENTRY_HEAD.unpack_from, ENTRY.size + MESSAGE_HEADER.size
    while position < end:
        if position + header > end:
            raise InvalidArgument("packed messages end inside a message header")
        mid, length, _, priority, count = unpack(packed, position)
        if length < MESSAGE_HEADER.size:
            raise InvalidArgument("packed message shorter than its header")
        heads.append((mid, priority, count))
        position += ENTRY.size + length
    if position != end:
        raise InvalidArgument("packed message of a wrong length")
    return heads


# ---------------------------------------------------------------------- packed leases
def pack_leases(leases: Iterable[tuple[int, int]]) -> bytes:
    """(message_id, delivery_count) pairs."""
    return b"".join([LEASE_REF.pack(mid, count) for mid, count in leases])


def unpack_leases(packed: bytes) -> list[tuple[int, int]]:
    """(message_id, delivery_count) pairs; InvalidArgument unless the bytes hold whole references."""
    if len(packed) % LEASE_REF.size:
        raise InvalidArgument(f"packed leases of {len(packed)} bytes are not {LEASE_REF.size}-byte references")
    return list(LEASE_REF.iter_unpack(packed))
