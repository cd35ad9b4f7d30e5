"""Kafka's embedded consumer protocol (protocol type "consumer"): the subscription a member sends in JoinGroup and
the assignment its leader hands out in SyncGroup. Pure.

The broker treats both as opaque bytes it stores and hands back; it reads them only to show a Kafka group in
raftbus's views (the topics each member subscribes to, the partitions it was given: `raftbus groups describe`,
the lag, the gateway). Bytes that do not decode (another protocol type, a client's own format) show no topics and
no partitions; they are stored all the same.

    Subscription v0-v3: version int16, topics [string], user_data bytes, (v1+) owned_partitions
                        [topic string, partitions [int32]], (v2+) generation_id int32, (v3+) rack_id string
    Assignment v0-v3:   version int16, assigned_partitions [topic string, partitions [int32]], user_data bytes
"""
from __future__ import annotations

import struct

PROTOCOL_TYPE = "consumer"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
ARRAY_ITEMS_MAX = 1_000_000  # a decoded array longer than this is not a subscription or an assignment


class _Reader:
    def __init__(self, data: bytes):
        self.data = memoryview(data)
        self.pos = 0

    def take(self, size: int) -> memoryview:
        if size < 0 or self.pos + size > len(self.data):
            raise ValueError("truncated")
        out = self.data[self.pos:self.pos + size]
        self.pos += size
        return out

    def i16(self) -> int:
        return _I16.unpack(self.take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self.take(4))[0]

    def string(self) -> str:
        size = self.i16()
        if size < 0:
            raise ValueError("null string")
        return bytes(self.take(size)).decode()

    def count(self) -> int:
        size = self.i32()
        if not 0 <= size <= ARRAY_ITEMS_MAX:
            raise ValueError(f"array of {size} items")
        return size


def subscription_topics(metadata: bytes) -> tuple[str, ...] | None:
    """The topics of a consumer subscription, sorted; None when the bytes are not one."""
    try:
        reader = _Reader(metadata)
        if reader.i16() < 0:
            return None
        return tuple(sorted({reader.string() for _ in range(reader.count())}))
    except (ValueError, UnicodeDecodeError, struct.error):
        return None


def assignment_partitions(assignment: bytes) -> tuple[tuple[str, int], ...] | None:
    """The (topic, partition) pairs of a consumer assignment, sorted; None when the bytes are not one (empty
    bytes are an empty assignment)."""
    if not assignment:
        return ()
    try:
        reader = _Reader(assignment)
        if reader.i16() < 0:
            return None
        pairs = set()
        for _ in range(reader.count()):
            topic = reader.string()
            pairs.update((topic, reader.i32()) for _ in range(reader.count()))
        return tuple(sorted(pairs))
    except (ValueError, UnicodeDecodeError, struct.error):
        return None


def encode_subscription(topics, version: int = 0, user_data: bytes | None = None) -> bytes:
    """A v0 subscription (tests and tools)."""
    parts = [_I16.pack(version), _I32.pack(len(topics))]
    for topic in topics:
        raw = topic.encode()
        parts += [_I16.pack(len(raw)), raw]
    parts.append(_I32.pack(-1) if user_data is None else _I32.pack(len(user_data)) + user_data)
    return b"".join(parts)


def encode_assignment(partitions, version: int = 0) -> bytes:
    """A v0 assignment of (topic, partition) pairs (tests and tools)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    parts = [_I16.pack(version), _I32.pack(len(by_topic))]
    for topic, numbers in sorted(by_topic.items()):
        raw = topic.encode()
        parts += [_I16.pack(len(raw)), raw, _I32.pack(len(numbers)), *(_I32.pack(p) for p in sorted(numbers))]
    parts.append(_I32.pack(-1))
    return b"".join(parts)
