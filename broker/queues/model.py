"""The values the queue service takes and gives (no gRPC): messages to enqueue, message views, statistics."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from raftbus.client.queues.ids import SEQ_BITS, message_id
from raftbus.client.queues.codec import MESSAGE_HEADER, pack_messages

from raftbus.broker.queues.state.records import StoredMessage, decode_message
from raftbus.broker.queues.state.tables import LeasedBatch


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message to enqueue; `record` is one record of client/records.py (timestamp, key, value, headers).

    origin_id, delivery_count, enqueued_ms and last_error are history, carried by dead-letter moves and redrives.
    """

    record: bytes
    priority: int = 0
    group: str = ""
    deliver_at_ms: int = 0
    idempotency_key: str = ""
    origin_id: int = 0
    delivery_count: int = 0
    enqueued_ms: int = 0
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class MessageView:
    message_id: int
    partition: int
    state: str                 # ready, delayed, in_flight, dead
    priority: int
    group: str
    delivery_count: int
    enqueued_ms: int
    available_ms: int          # delayed: when it becomes ready; ready: since when
    lease_deadline_ms: int     # in flight: when the lease expires, else 0
    origin_id: int
    idempotency_key: str
    last_error: str
    record: bytes

    @classmethod
    def of(cls, partition: int, seq: int, m: StoredMessage) -> "MessageView":
        return cls(message_id(partition, seq), partition, m.state_name, m.priority, _text(m.group), m.delivery_count,
                   m.enqueued_ms, m.available_ms, m.deadline_ms, m.origin_id, _text(m.idempotency_key),
                   _text(m.last_error), m.record)


class LeasedMessages(Sequence):
    """The messages one lease took from a partition, as stored: MessageViews on demand (indexing), or packed
    for the wire without decoding them."""

    __slots__ = ("partition", "batch")

    def __init__(self, partition: int, batch: LeasedBatch):
        self.partition = partition
        self.batch = batch

    @classmethod
    def none(cls, partition: int) -> "LeasedMessages":
        return cls(partition, LeasedBatch([], []))

    def __len__(self) -> int:
        return len(self.batch)

    def __eq__(self, other) -> bool:
        return isinstance(other, (list, tuple, LeasedMessages)) and list(self) == list(other)

    __hash__ = None

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        leased = self.batch[index]
        return MessageView.of(self.partition, leased.seq, decode_message(leased.raw))

    def seqs(self) -> list[int]:
        return [int.from_bytes(key, "big") for key in self.batch.seq_keys]

    @property
    def lease_deadline_ms(self) -> int:
        """The deadline every lease of the batch shares."""
        return MESSAGE_HEADER.unpack_from(self.batch.rows[0])[5]

    def packed(self) -> bytes:
        """The packed messages of proto/queues.proto (the stored rows, framed with their ids)."""
        base = self.partition << SEQ_BITS
        return pack_messages((base | int.from_bytes(key, "big"), row)
                             for key, row in zip(self.batch.seq_keys, self.batch.rows))


@dataclass(frozen=True, slots=True)
class GroupStatsView:
    group: str
    ready: int
    delayed: int
    in_flight: int
    dead: int
    oldest_ready_age_ms: int | None


@dataclass(frozen=True, slots=True)
class PartitionStatsView:
    partition: int
    ready: int
    delayed: int
    in_flight: int
    dead: int                  # dead-lettered, not yet moved to the dead-letter topic
    oldest_ready_age_ms: int | None
    next_delivery_ms: int | None  # when the earliest delayed message becomes ready
    enqueued_total: int
    groups: tuple[GroupStatsView, ...]
    groups_truncated: bool


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")
