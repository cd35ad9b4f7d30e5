"""One partition's batch of the sync Producer: records encoded into one bytearray as they are sent.

`Producer.send` appends a record's bytes to its partition's open batch and gets back its index; the record's
future is a view of the batch's outcome (client/record_future.py). So sending a record allocates its bytes and
one small future, and answering a batch settles every record of it in one step. The bytes are Kafka's record
format (client/kafka_batch.py): offset deltas from 0, timestamp deltas from the batch's first record; the batch
is sealed into one RecordBatch v2 (header and CRC-32C) when it is first sent, so the partition stores it as
Kafka clients read it (docs/kafka.md). `Producer.send_batch` fills a batch with records encoded up front and one
future for the whole batch.
"""
from __future__ import annotations

from concurrent.futures import Future

from raftbus.client import kafka_batch
from raftbus.client.record_future import BatchOutcome
from raftbus.client.records import Header, RecordMetadata
from raftbus.client.sender import PendingBatch


class RecordBatch(PendingBatch):
    """Records bound for one partition, sent and retried as one ProduceRequest."""

    __slots__ = ("id", "buffer", "count", "base_timestamp_ms", "max_timestamp_ms", "outcome", "encoded",
                 "bulk_future")

    def __init__(self, batch_id: int, topic: str, partition: int, now_s: float, linger_s: float):
        super().__init__(topic, partition, now_s, linger_s)
        self.id = batch_id
        self.buffer = bytearray()
        self.count = 0
        self.base_timestamp_ms = 0  # the first record's (its timestamp delta is 0)
        self.max_timestamp_ms = -1
        self.outcome = BatchOutcome(topic, partition)
        self.encoded: tuple[bytes, int, int] | None = None
        self.bulk_future: Future | None = None

    def add(self, timestamp_ms: int, key: bytes | None, value: bytes | None, headers: tuple[Header, ...],
            size: int) -> int:
        """Encode one record (`size` bytes by raftbus's own measure, a bound on its Kafka bytes) at the end of the
        batch; returns its index in the batch."""
        index = self.count
        if not index:
            self.base_timestamp_ms = timestamp_ms
        self.buffer += kafka_batch.encode_record(index, timestamp_ms - self.base_timestamp_ms, key, value, headers)
        if timestamp_ms > self.max_timestamp_ms:
            self.max_timestamp_ms = timestamp_ms
        self.size_bytes += size
        self.count = index + 1
        return index

    def record_count(self) -> int:
        return self.encoded[1] if self.encoded is not None else self.count

    def encode(self) -> tuple[bytes, int, int]:
        """(blob, record count, max timestamp): fixed when the batch is first sent, the same on every retry."""
        if self.encoded is None:
            blob = kafka_batch.seal(0, kafka_batch.NONE, self.count, self.base_timestamp_ms, self.max_timestamp_ms,
                                    bytes(self.buffer))
            self.encoded = (blob, self.count, self.max_timestamp_ms)
            self.buffer = bytearray()
        return self.encoded

    def resolve(self, base_offset: int) -> None:
        if self.bulk_future is None:
            self.outcome.settle(base_offset, None)
        elif not self.bulk_future.done():
            ts = self.encoded[2] if self.encoded else -1
            self.bulk_future.set_result(RecordMetadata(self.topic, self.partition, base_offset, ts))

    def fail(self, err: BaseException) -> None:
        if self.bulk_future is None:
            self.outcome.settle(-1, err)
        elif not self.bulk_future.done():
            self.bulk_future.set_exception(err)
