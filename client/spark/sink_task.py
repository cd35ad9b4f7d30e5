"""One sink task's writer: routes each row to a partition and writes it through the task's one producer.

Stream topics go through a SequencedSender under the task's derived producer id (replays are recognised,
see sink_sender). Queue topics go through the SDK Producer's queue path, each message with an idempotency
key (the row's `idempotency_key`, else one derived from the task's producer id and the message's place in
the task), so a replayed message is dropped by the broker within its idempotency window.

Partitions: the `partition` column if set, else murmur2 of the key (Kafka's partitioner), else the topic's
sticky partition, which starts at the task's partition id and moves on each time its batch fills; all of
it depends only on the rows, so a replay routes every record where the first attempt did.
"""
from __future__ import annotations

import threading
import time

from raftbus.client import Producer
from raftbus.client.errors import InvalidArgument, RecordTooLarge, UnknownPartition, WrongTopicKind
from raftbus.client.murmur2 import partition_for_key
from raftbus.client.produce_stream import StreamProduceTransport
from raftbus.client.records import RECORD_OVERHEAD_BYTES, record_size
from raftbus.client.router import Router
from raftbus.client.spark.sink_columns import QUEUE_COLUMNS, SinkRow, sink_rows_of
from raftbus.client.spark.sink_identity import queue_idempotency_key
from raftbus.client.spark.sink_options import SinkOptions
from raftbus.client.spark.sink_sender import SequencedSender, WriteCounts


class _Topic:
    __slots__ = ("name", "kind", "partitions", "sticky")

    def __init__(self, name: str, kind: str, partitions: int, first: int):
        self.name, self.kind, self.partitions, self.sticky = name, kind, partitions, first % partitions


class TaskWriter:
    """Writes one task's rows; `finish()` waits for all of them, `close()` always (see the module docstring)."""

    def __init__(self, options: SinkOptions, producer_id: bytes, task_partition: int):
        self._options = options
        self._producer_id = producer_id
        self._task_partition = task_partition
        self._router = Router(options.bootstrap, request_timeout_ms=options.request_timeout_ms,
                              metadata_max_age_ms=options.metadata_max_age_ms, retries=options.retries,
                              retry_backoff_ms=options.retry_backoff_ms)
        self._transport = StreamProduceTransport(self._router)
        self._sender = SequencedSender(self._transport, producer_id, options.batch_bytes_max,
                                       options.buffer_bytes_max, options.delivery_timeout_ms)
        self._topics: dict[str, _Topic] = {}
        self._queue: _QueueWrites | None = None
        self._queue_messages = 0

    def write(self, row: SinkRow) -> None:
        topic = self._topic(self._options.topic or row.topic)
        if topic.kind == "queue":
            self._write_queue(topic, row)
            return
        given = [name for name, v in zip(QUEUE_COLUMNS, row[5:]) if v is not None]
        if given:
            raise WrongTopicKind.queue_only(given, topic.name)
        size = record_size(row.key, row.value, row.headers)
        if size > self._options.batch_bytes_max:
            raise RecordTooLarge(f"a record of {size} bytes for {topic.name!r} exceeds batchBytesMax="
                                 f"{self._options.batch_bytes_max}")
        partition = self._partition(topic, row.partition, row.key, size)
        self._sender.add((topic.name, partition), (time.time_ns() // 1_000_000, row.key, row.value, row.headers),
                         size)

    def write_columns(self, columns: dict[str, list], rows: int) -> None:
        """Write one Arrow batch's rows (sink_columns.batch_columns). Rows for the `topic` option's stream
        topic without queue columns take a loop over the columns; anything else goes row by row."""
        topic = self._topic(self._options.topic) if self._options.topic else None
        if topic is None or topic.kind != "stream" or any(name in columns for name in QUEUE_COLUMNS):
            for row in sink_rows_of(columns, rows):
                self.write(row)
            return
        absent = [None] * rows
        now_ms = time.time_ns() // 1_000_000
        name, count, limit, add = topic.name, topic.partitions, self._options.batch_bytes_max, self._sender.add
        for key, value, headers, partition in zip(columns.get("key", absent), columns["value"],
                                                  columns.get("headers") or [()] * rows,
                                                  columns.get("partition", absent)):
            size = (RECORD_OVERHEAD_BYTES + (len(key) if key is not None else 0)
                    + (len(value) if value is not None else 0))
            if headers:
                size = record_size(key, value, headers)
            if size > limit:
                raise RecordTooLarge(f"a record of {size} bytes for {name!r} exceeds batchBytesMax={limit}")
            if partition is None and key is not None:
                partition = partition_for_key(key, count)
            elif partition is None or not 0 <= partition < count:
                partition = self._partition(topic, partition, key, size)
            add((name, partition), (now_ms, key, value, headers), size)

    def finish(self) -> WriteCounts:
        counts = self._sender.finish()
        if self._queue is not None:
            counts.add(self._queue.finish())
        return counts

    def close(self) -> None:
        if self._queue is not None:
            self._queue.close()
        self._transport.close()

    def _topic(self, name: str | None) -> _Topic:
        if not name:
            raise InvalidArgument("a row has no topic: set the option topic or a non-null topic column")
        topic = self._topics.get(name)
        if topic is None:
            kind, count = self._router.topic_kind(name), self._router.partitions_for(name)
            topic = self._topics[name] = _Topic(name, kind, count, self._task_partition)
        return topic

    def _partition(self, topic: _Topic, partition: int | None, key: bytes | None, size: int) -> int:
        if partition is not None:
            if not 0 <= partition < topic.partitions:
                raise UnknownPartition(f"topic {topic.name!r} has no partition {partition} "
                                       f"(it has {topic.partitions})")
            return partition
        if key is not None:
            return partition_for_key(key, topic.partitions)
        if self._sender.would_close((topic.name, topic.sticky), size):
            topic.sticky = (topic.sticky + 1) % topic.partitions
        return topic.sticky

    def _write_queue(self, topic: _Topic, row: SinkRow) -> None:
        if self._queue is None:
            self._queue = _QueueWrites(self._options)
        key = row.idempotency_key
        if key is None and self._options.idempotency_keys:
            key = queue_idempotency_key(self._producer_id, self._queue_messages)
        self._queue_messages += 1
        deliver_at_ms = None if row.delay_ms is None else time.time_ns() // 1_000_000 + row.delay_ms
        self._queue.send(topic.name, row, deliver_at_ms, key)


class _QueueWrites:
    """The task's SDK Producer for queue topics, and what its messages came to."""

    def __init__(self, options: SinkOptions):
        self._producer = Producer(options.bootstrap, batch_bytes_max=options.batch_bytes_max,
                                  buffer_bytes_max=options.buffer_bytes_max,
                                  request_timeout_ms=options.request_timeout_ms, retries=options.retries,
                                  retry_backoff_ms=options.retry_backoff_ms,
                                  delivery_timeout_ms=options.delivery_timeout_ms,
                                  metadata_max_age_ms=options.metadata_max_age_ms)
        self._lock = threading.Lock()
        self._counts = WriteCounts()
        self._error: BaseException | None = None

    def send(self, topic: str, row: SinkRow, deliver_at_ms: int | None, idempotency_key: str | None) -> None:
        if self._error is not None:
            raise self._error
        future = self._producer.send(topic, row.value, key=row.key, headers=row.headers or None,
                                     partition=row.partition, priority=row.priority, group=row.group,
                                     deliver_at_ms=deliver_at_ms, idempotency_key=idempotency_key)
        future.add_done_callback(self._settled)

    def _settled(self, future) -> None:
        with self._lock:
            if future.exception() is not None:
                self._error = self._error or future.exception()
            elif future.result().duplicate:
                self._counts.already_written += 1
            else:
                self._counts.appended += 1

    def finish(self) -> WriteCounts:
        self._producer.flush()
        if self._error is not None:
            raise self._error
        return self._counts

    def close(self) -> None:
        self._producer.close()
