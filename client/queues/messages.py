"""What the SDK hands out for queue topics: enqueue metadata, messages (leased or inspected) and statistics."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import asdict, dataclass
from typing import Protocol

from raftbus.client.queues.codec import STATE_NAMES, iter_messages, message_fields
from raftbus.client.records import Header, decode_batch
from raftbus.client.wire import queues_pb2 as qpb


@dataclass(frozen=True, slots=True)
class MessageMetadata:
    """Where an enqueued message landed. `message_id` is stable for the message's life (it carries the partition);
    `duplicate` is True when an idempotency key (or a producer retry) matched an earlier message: the id is
    that message's."""

    topic: str
    partition: int
    message_id: int
    duplicate: bool
    timestamp_ms: int


class Settler(Protocol):
    """Who carries a leased message's ack, nack and extend to its partition leader (batched or not)."""

    def ack(self, message: "Message") -> Future: ...

    def nack(self, message: "Message", delay_ms: int | None, reason: str) -> Future: ...

    def extend(self, message: "Message", visibility_ms: int) -> Future: ...


@dataclass(slots=True)
class Message:
    """A queue message as the broker showed it: leased (from a consumer or a lease) or inspected (get, peek).

    A leased message is settled with ack(), nack(delay_ms=None) or extend(visibility_ms); each returns a Future
    (acks are batched per partition). They fail with LeaseLost when the lease expired or the message was
    leased again, since (message_id, delivery_count) names one lease.
    """

    topic: str
    partition: int
    message_id: int
    state: str
    priority: int
    group: str
    delivery_count: int
    enqueued_ms: int
    available_ms: int
    lease_deadline_ms: int
    origin_id: int
    idempotency_key: str
    last_error: str
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp_ms: int
    settler: Settler | None = None

    @classmethod
    def from_proto(cls, topic: str, m: qpb.QueueMessage, settler: Settler | None = None) -> "Message":
        records = decode_batch(m.record) if m.record else [(0, None, None, ())]
        timestamp_ms, key, value, headers = records[0]
        return cls(topic, m.partition, m.message_id, m.state, m.priority, m.group, m.delivery_count, m.enqueued_ms,
                   m.available_ms, m.lease_deadline_ms, m.origin_id, m.idempotency_key, m.last_error, key, value,
                   tuple(headers or ()), timestamp_ms, settler)

    @classmethod
    def from_packed(cls, topic: str, partition: int, message_id: int, message,
                    settler: Settler | None = None) -> "Message":
        """One message of a packed batch (proto/queues.proto)."""
        f = message_fields(message)
        records = decode_batch(f.record) if f.record else [(0, None, None, ())]
        timestamp_ms, key, value, headers = records[0]
        return cls(topic, partition, message_id, STATE_NAMES.get(f.state, "unknown"), f.priority, _utf8(f.group),
                   f.delivery_count, f.enqueued_ms, f.available_ms, f.lease_deadline_ms, f.origin_id,
                   _utf8(f.idempotency_key), _utf8(f.last_error), key, value, tuple(headers or ()), timestamp_ms,
                   settler)

    @property
    def id(self) -> int:
        """The message id (same as message_id)."""
        return self.message_id

    def _settler(self) -> Settler:
        if self.settler is None:
            from raftbus.client.errors import InvalidArgument

            raise InvalidArgument("this message was not leased (get/peek show messages without leasing them)")
        return self.settler

    def ack(self) -> Future:
        """Done with it: the message is removed."""
        return self._settler().ack(self)

    def nack(self, delay_ms: int | None = None, reason: str = "") -> Future:
        """Give it back: ready again after delay_ms, or after the topic's backoff when None. Counts a delivery."""
        return self._settler().nack(self, delay_ms, reason)

    def extend(self, visibility_ms: int) -> Future:
        """Keep the lease: it now ends visibility_ms from now. The future carries the new deadline."""
        return self._settler().extend(self, visibility_ms)

    def to_dict(self) -> dict:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "settler"}
        data["key"] = _text(self.key)
        data["value"] = _text(self.value)
        data["headers"] = [[name, _text(value)] for name, value in self.headers]
        return data


def leased_messages(topic: str, partition: int, response: qpb.LeaseResponse,
                    settler: Settler | None = None) -> list[Message]:
    """The messages of a lease answer, packed or not."""
    if response.packed_messages:
        return [Message.from_packed(topic, partition, mid, message, settler)
                for mid, message in iter_messages(response.packed_messages)]
    return [Message.from_proto(topic, m, settler) for m in response.messages]


def _utf8(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


@dataclass(frozen=True, slots=True)
class GroupQueueStats:
    group: str
    ready: int
    delayed: int
    in_flight: int
    dead: int
    oldest_ready_age_ms: int | None


@dataclass(frozen=True, slots=True)
class PartitionQueueStats:
    partition: int
    ready: int
    delayed: int
    in_flight: int
    dead: int                           # dead-lettered, still being moved to the dead-letter topic
    oldest_ready_age_ms: int | None
    next_delivery_ms: int | None        # when the earliest delayed message becomes ready (ms since epoch)
    enqueued_total: int
    groups: tuple[GroupQueueStats, ...]
    groups_truncated: bool

    @classmethod
    def from_proto(cls, s: qpb.QueuePartitionStats) -> "PartitionQueueStats":
        return cls(s.partition, s.ready, s.delayed, s.in_flight, s.dead, _age(s.oldest_ready_age_ms),
                   _age(s.next_delivery_ms), s.enqueued_total,
                   tuple(GroupQueueStats(g.group, g.ready, g.delayed, g.in_flight, g.dead, _age(g.oldest_ready_age_ms))
                         for g in s.groups), s.groups_truncated)


def _age(value: int) -> int | None:
    return None if value < 0 else value


@dataclass(frozen=True, slots=True)
class QueueStats:
    """A queue topic's state: totals, per partition and per group; `dead_lettered` counts its dead-letter topic."""

    topic: str
    ready: int
    delayed: int
    in_flight: int
    dead: int
    dead_lettered: int
    oldest_ready_age_ms: int | None
    partitions: tuple[PartitionQueueStats, ...]
    groups: tuple[GroupQueueStats, ...]

    @classmethod
    def combine(cls, topic: str, partitions: list[PartitionQueueStats], dead_lettered: int) -> "QueueStats":
        groups: dict[str, list] = {}
        for p in partitions:
            for g in p.groups:
                row = groups.setdefault(g.group, [0, 0, 0, 0, None])
                for i, value in enumerate((g.ready, g.delayed, g.in_flight, g.dead)):
                    row[i] += value
                row[4] = _oldest(row[4], g.oldest_ready_age_ms)
        oldest = None
        for p in partitions:
            oldest = _oldest(oldest, p.oldest_ready_age_ms)
        return cls(topic, sum(p.ready for p in partitions), sum(p.delayed for p in partitions),
                   sum(p.in_flight for p in partitions), sum(p.dead for p in partitions), dead_lettered, oldest,
                   tuple(partitions), tuple(GroupQueueStats(g, *row) for g, row in sorted(groups.items())))

    def to_dict(self) -> dict:
        return asdict(self)


def _oldest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
