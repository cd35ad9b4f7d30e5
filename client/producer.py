"""The Producer: accumulates records into per-partition batches and sends them from one background thread.

Batches close at `batch_bytes_max` or after `linger_ms`. With `linger_ms=0`, a new batch of a partition that
has nothing in flight is sent by `send()` itself, sparing a hand-off to the sender thread; whichever thread
sends holds one lock while it writes the batches it took, so each partition's batches leave in sequence order. Up
to `max_in_flight_per_partition` batches per partition (1 by default: records sent meanwhile gather into the next
batch) are in flight at a time, on one pipelined produce stream per broker (client/produce_stream.py), which the
broker appends in the order sent. Idempotence keeps that order and exactly-once appends across retries:
every batch carries the producer's random 16-byte id and `base_sequence` (records sent to that partition
before it), assigned when the batch is first sent and kept on every retry, so the broker drops a batch it
already appended and answers with the original offsets, and refuses one that would leave a gap.

Each partition's batches go through a PartitionLane (client/producer_lane.py), the idempotent-producer rules
that AsyncProducer, the queue sender and the Spark sink drive too: after a failure, nothing more is sent to the
partition until every batch in flight there has answered; then the failed ones go again, in sequence order,
ahead of the rest. A batch that fails for good (a non-retriable error, or `delivery_timeout_ms` spent) fails
its futures, and the partition starts over under a fresh producer id with sequences from 0; a partition that
forgot this producer (UNKNOWN_PRODUCER_ID after every earlier batch was acknowledged) starts over the same way
without failing anything.
"""
from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol


from raftbus.client import settings
from raftbus.client.errors import (
    BatchTooLarge,
    EmptyBatch,
    InvalidArgument,
    RaftbusError,
    RecordTooLarge,
    RequestTimedOut,
    Unavailable,
    UnknownPartition,
    WrongTopicKind,
)
from raftbus.client.murmur2 import KeyHashes
from raftbus.client.produce_stream import StreamProduceTransport
from raftbus.client.producer_lane import RENEW, Complete, PartitionLane
from raftbus.client.queues.producer import QueueSender, queue_partition
from raftbus.client.wire import queues_pb2 as qpb
from raftbus.client.record_batch import RecordBatch
from raftbus.client.record_future import RecordFuture
from raftbus.client.kafka_batch import keyless_record
from raftbus.client.records import (
    RECORD_OVERHEAD_BYTES, Header, RecordMetadata, RecordTuple, append_record, encode_stream_batch, record_size,
)
from raftbus.client.credentials import TlsSource
from raftbus.client.router import Router
from raftbus.client.sender import PendingBatch, SenderCore
from raftbus.client.wire import raftbus_pb2 as pb

_KEYLESS_RECORD = keyless_record  # (offset delta, timestamp delta, value) -> one Kafka record's bytes

ProduceDone = Callable[["pb.ProduceResponse | None", "RaftbusError | None"], None]


def reject_queue_options(priority=None, group=None, deliver_at_ms=None, idempotency_key=None, *,
                         topic: str | None = None) -> None:
    """Queue-only options on a stream topic are a WrongTopicKind (the SDK and the CLI share this message)."""
    given = [name for name, v in (("priority", priority), ("group", group), ("deliver_at_ms", deliver_at_ms),
                                  ("idempotency_key", idempotency_key)) if v is not None]
    if given:
        raise WrongTopicKind.queue_only(given, topic)


def check_queue_fields(priority, group, deliver_at_ms, idempotency_key) -> None:
    """InvalidArgument for queue fields of the wrong type or range."""
    if priority is not None and (not isinstance(priority, int) or not -2**31 <= priority < 2**31):
        raise InvalidArgument("priority must be an int32")
    if deliver_at_ms is not None and (not isinstance(deliver_at_ms, int) or deliver_at_ms < 0):
        raise InvalidArgument("deliver_at_ms must be a time in ms (an int >= 0)")
    if group is not None and not isinstance(group, str):
        raise InvalidArgument("group must be a str")
    if idempotency_key is not None and not isinstance(idempotency_key, str):
        raise InvalidArgument("idempotency_key must be a str")


def queue_message(record: bytes, priority, group, deliver_at_ms, idempotency_key) -> qpb.EnqueueMessage:
    """The Enqueue form of one message; InvalidArgument for fields of the wrong type or range."""
    check_queue_fields(priority, group, deliver_at_ms, idempotency_key)
    return qpb.EnqueueMessage(record=record, priority=priority or 0, group=group or "",
                              deliver_at_ms=deliver_at_ms or 0, idempotency_key=idempotency_key or "")


def to_bytes(data: Any, what: str) -> bytes | None:
    """bytes stay, str becomes utf-8, None stays None; anything else is an InvalidArgument."""
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise InvalidArgument(f"{what} must be bytes or str, not {type(data).__name__}")


def normalize_headers(headers: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> tuple[Header, ...]:
    if not headers:
        return ()
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for pair in pairs:
        try:
            name, hvalue = pair
        except (TypeError, ValueError):
            raise InvalidArgument("headers must be a mapping or (name, value) pairs") from None
        if not isinstance(name, str):
            raise InvalidArgument(f"header name must be str, not {type(name).__name__}")
        out.append((name, to_bytes(hvalue, f"header {name!r}")))
    return tuple(out)


def encode_bulk(records: Sequence[Any], batch_bytes_max: int) -> tuple[bytes, int, int]:
    """send_batch's records (values, or (key, value) pairs) encoded now as one batch: (blob, count, max
    timestamp). EmptyBatch without records, BatchTooLarge when the blob exceeds batch_bytes_max."""
    if not records:
        raise EmptyBatch("send_batch needs at least one record")
    now_ms = time.time_ns() // 1_000_000
    tuples = []
    for item in records:
        if isinstance(item, tuple):
            key, value = item
            tuples.append((now_ms, to_bytes(key, "key"), to_bytes(value, "value"), ()))
        else:
            tuples.append((now_ms, None, to_bytes(item, "value"), ()))
    encoded = encode_stream_batch(tuples)
    if len(encoded[0]) > batch_bytes_max:
        raise BatchTooLarge(f"batch of {len(encoded[0])} bytes exceeds batch_bytes_max={batch_bytes_max}")
    return encoded


class ProduceTransport(Protocol):
    """What the sender needs from the network (a fake one drives the unit tests).

    A transport with a `router` (StreamProduceTransport) also serves queue topics; one without serves streams only.
    """

    def partitions_for(self, topic: str) -> int: ...

    def send(self, request: pb.ProduceRequest, done: ProduceDone) -> None: ...

    def retry_delay_s(self, err: RaftbusError, attempt: int, topic: str, partition: int) -> float | None: ...

    def close(self) -> None: ...


class _Batch(PendingBatch):
    """Records bound for one partition, sent and retried as one ProduceRequest."""

    __slots__ = ("id", "records", "encoded", "bulk_future")

    def __init__(self, batch_id: int, topic: str, partition: int, now_s: float, linger_s: float):
        super().__init__(topic, partition, now_s, linger_s)
        self.id = batch_id
        self.records: list[RecordTuple] = []
        self.encoded: tuple[bytes, int, int] | None = None
        self.bulk_future: Future | None = None

    def record_count(self) -> int:
        return self.encoded[1] if self.encoded is not None else len(self.records)

    def add(self, record, future, size: int, size_max: int) -> bool:
        """Append one record and its future; True once the batch holds `size_max` bytes (time to close it)."""
        self.records.append(record)
        self.futures.append(future)
        self.size_bytes += size
        return self.size_bytes >= size_max

    def encode(self) -> tuple[bytes, int, int]:
        if self.encoded is None:
            self.encoded = encode_stream_batch(self.records)
        return self.encoded

    def resolve(self, base_offset: int) -> None:
        if self.bulk_future is not None:
            ts = self.encoded[2] if self.encoded else -1
            _settle(self.bulk_future, RecordMetadata(self.topic, self.partition, base_offset, ts))
            return
        topic, partition = self.topic, self.partition
        for i, (future, record) in enumerate(zip(self.futures, self.records)):
            _settle(future, RecordMetadata(topic, partition, base_offset + i, record[0]))

    def fail(self, err: BaseException) -> None:
        if self.bulk_future is None:
            super().fail(err)
        elif not self.bulk_future.done():
            self.bulk_future.set_exception(err)


def _settle(future: Future, value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _accepted_future() -> Future:
    future: Future = Future()
    future.set_running_or_notify_cancel()  # accepted records cannot be cancelled
    return future


class Producer(SenderCore):
    """Sends records to raftbus topics; see the module docstring for batching, ordering and idempotence."""

    def __init__(
        self,
        bootstrap: str | list[str] | None = None,
        *,
        linger_ms: int = settings.LINGER_MS,
        batch_bytes_max: int = settings.BATCH_BYTES_MAX,
        buffer_bytes_max: int = settings.BUFFER_BYTES_MAX,
        request_timeout_ms: int = settings.REQUEST_TIMEOUT_MS,
        tls_ca: TlsSource = None, tls_cert: TlsSource = None, tls_key: TlsSource = None, token: str | None = None,
        retries: int = settings.RETRIES,
        retry_backoff_ms: int = settings.RETRY_BACKOFF_MS,
        delivery_timeout_ms: int = settings.DELIVERY_TIMEOUT_MS,
        max_block_ms: int = settings.MAX_BLOCK_MS,
        metadata_max_age_ms: int = settings.METADATA_MAX_AGE_MS,
        idempotent: bool = settings.IDEMPOTENT,
        max_in_flight_per_partition: int = settings.MAX_IN_FLIGHT_PER_PARTITION,
        transport: ProduceTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if batch_bytes_max <= 0 or buffer_bytes_max < batch_bytes_max:
            raise InvalidArgument("need 0 < batch_bytes_max <= buffer_bytes_max")
        if not 1 <= max_in_flight_per_partition <= settings.MAX_IN_FLIGHT_PER_PARTITION_MAX:
            raise InvalidArgument(f"max_in_flight_per_partition must be 1..{settings.MAX_IN_FLIGHT_PER_PARTITION_MAX} "
                                  "(the broker remembers that many batches per producer for retries)")
        if transport is None:
            transport = StreamProduceTransport(Router(
                bootstrap, request_timeout_ms=request_timeout_ms, metadata_max_age_ms=metadata_max_age_ms,
                retries=retries, retry_backoff_ms=retry_backoff_ms,
                tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token,
            ))
        super().__init__(linger_ms=linger_ms, batch_bytes_max=batch_bytes_max, buffer_bytes_max=buffer_bytes_max,
                         delivery_timeout_ms=delivery_timeout_ms, max_block_ms=max_block_ms, clock=clock)
        self.idempotent = idempotent
        self.max_in_flight_per_partition = max_in_flight_per_partition
        self.producer_id = self._new_producer_id()
        self._transport = transport
        self._sticky: dict[str, tuple[int, int]] = {}  # topic -> (sticky partition, partition count)
        self._sticky_open: dict[str, tuple[RecordBatch, int]] = {}  # topic -> (its sticky batch, partition count)
        self._router: Router | None = getattr(transport, "router", None)
        self._key_hashes = KeyHashes(settings.KEY_HASH_ENTRIES_MAX)  # murmur2 of recent keys
        self._shapes: dict[str, tuple[int, str, int]] = {}  # topic -> (router map version, kind, partition count)
        self._incomplete: set[int] = set()
        self._batch_ids = itertools.count(1)
        self._request_ids = itertools.count(1)
        self._closed = False
        self._start_sender("raftbus-producer-sender")
        # queue topics: a sender of their own, started on the first queue message
        self._queue_options = dict(linger_ms=linger_ms, batch_bytes_max=batch_bytes_max,
                                   buffer_bytes_max=buffer_bytes_max, delivery_timeout_ms=delivery_timeout_ms,
                                   max_block_ms=max_block_ms)
        self._queue_sender: QueueSender | None = None

    # ------------------------------------------------------------------ public API

    def send(self, topic: str, value: bytes | str | None, key: bytes | str | None = None,
             headers: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None, partition: int | None = None,
             priority: int | None = None, group: str | None = None, deliver_at_ms: int | None = None,
             idempotency_key: str | None = None) -> Future:
        """Queue one record; the future resolves to its RecordMetadata once the partition acknowledges it.

        On a queue topic the future resolves to MessageMetadata (the message id) and priority, group,
        deliver_at_ms and idempotency_key apply; on a stream topic they are refused (WrongTopicKind).
        Raises at once: InvalidArgument (bad types), RecordTooLarge, UnknownTopic, UnknownPartition, and
        Overloaded when the buffer stays full for `max_block_ms`. The record is encoded into its partition's
        open batch now; its future is a view of that batch's answer (client/record_future.py).
        """
        if key is None and partition is None and type(value) is bytes and not headers and priority is None \
                and group is None and deliver_at_ms is None and idempotency_key is None:
            # The common call (a keyless bytes value, no headers): appended to the topic's open sticky batch right
            # here when that batch has records and room. Anything else, a new batch included, takes `_send`.
            router = self._router
            if router is None:
                count = self._transport.partitions_for(topic)
            else:
                shape = self._shapes.get(topic)
                count = shape[2] if shape is not None and shape[0] == router.map_version and shape[1] == "stream" \
                    else -1
            size = RECORD_OVERHEAD_BYTES + len(value)
            timestamp_ms = time.time_ns() // 1_000_000
            with self._lock:
                sticky = self._sticky_open.get(topic)
                if sticky is not None and sticky[1] == count:
                    batch = sticky[0]
                    index = batch.count
                    if index and not batch.closed and batch.size_bytes + size < self.batch_bytes_max \
                            and self._buffer_used_bytes + size <= self.buffer_bytes_max and not self._closed:
                        self._buffer_used_bytes += size
                        batch.buffer += _KEYLESS_RECORD(index, timestamp_ms - batch.base_timestamp_ms, value)
                        if timestamp_ms > batch.max_timestamp_ms:
                            batch.max_timestamp_ms = timestamp_ms
                        batch.size_bytes += size
                        batch.count = index + 1
                        return RecordFuture(batch.outcome, index, timestamp_ms)
        return self._send(topic, value, key, headers, partition, priority, group, deliver_at_ms, idempotency_key)

    def _send(self, topic: str, value, key, headers, partition: int | None, priority, group, deliver_at_ms,
              idempotency_key) -> Future:
        """send() for every record the fast path above does not take."""
        kind, count = self._topic_shape(topic)
        if kind == "queue":
            return self._send_queue(topic, count, value, key, headers, partition,
                                    (priority, group, deliver_at_ms, idempotency_key))
        if priority is not None or group is not None or deliver_at_ms is not None or idempotency_key is not None:
            reject_queue_options(priority, group, deliver_at_ms, idempotency_key, topic=topic)
        if value is not None and type(value) is not bytes:
            value = to_bytes(value, "value")
        if key is not None and type(key) is not bytes:
            key = to_bytes(key, "key")
        if headers:
            headers = normalize_headers(headers)
            size = record_size(key, value, headers)
        else:
            headers = ()
            size = RECORD_OVERHEAD_BYTES + (len(value) if value is not None else 0) + \
                (len(key) if key is not None else 0)
        if size > self.batch_bytes_max:
            raise RecordTooLarge(f"record of {size} bytes exceeds batch_bytes_max={self.batch_bytes_max}")
        if partition is not None:
            self._check_partition(topic, partition, count)
        timestamp_ms = time.time_ns() // 1_000_000
        with self._lock:
            if self._closed:
                raise Unavailable("producer is closed")
            if self._buffer_used_bytes + size <= self.buffer_bytes_max:
                self._buffer_used_bytes += size
            else:
                self._reserve(size)
            if partition is None and key is None:
                sticky = self._sticky_open.get(topic)  # (open batch, partition count) of the sticky partition
                if sticky is not None and sticky[1] == count and not sticky[0].closed \
                        and sticky[0].size_bytes + size <= self.batch_bytes_max:
                    batch = sticky[0]
                else:
                    batch = self._sticky_batch(topic, count, size)
            else:
                batch = self._open_batch((topic, self._key_hashes.partition(key, count) if partition is None
                                          else partition), size)
            index = batch.add(timestamp_ms, key, value, headers, size)
            at_once = False
            if batch.size_bytes >= self.batch_bytes_max:
                self._close_open_batch((batch.topic, batch.partition))
                self._cond.notify_all()
            elif index == 0:  # a new batch: sent now, or the sender thread learns when its linger ends
                at_once = self._take_at_once(batch)
                if not at_once:
                    self._cond.notify_all()
            outcome = batch.outcome
        if at_once:
            try:
                self._dispatch(batch)
            finally:
                self._dispatching.release()
        return RecordFuture(outcome, index, timestamp_ms)

    def _topic_shape(self, topic: str) -> tuple[str, int]:
        """(kind, partition count) of `topic`, kept while the router's cluster map stays the same one."""
        router = self._router
        if router is None:
            return "stream", self._transport.partitions_for(topic)
        shape = self._shapes.get(topic)
        if shape is not None and shape[0] == router.map_version:
            return shape[1], shape[2]
        version = router.map_version
        kind, count = router.topic_kind(topic), router.partitions_for(topic)
        self._shapes[topic] = (version, kind, count)
        return kind, count

    def _send_queue(self, topic: str, count: int, value, key, headers, partition: int | None,
                    queue_fields: tuple) -> Future:
        """One message for a queue topic: validated and encoded now, carried as a tuple in its partition's batch
        (the EnqueueMessage is built once, when the batch goes out)."""
        priority, group, deliver_at_ms, idempotency_key = queue_fields
        check_queue_fields(priority, group, deliver_at_ms, idempotency_key)
        value_b = value if value is None or type(value) is bytes else to_bytes(value, "value")
        key_b = key if key is None or type(key) is bytes else to_bytes(key, "key")
        hdrs = normalize_headers(headers) if headers else ()
        record = bytearray()
        append_record(record, time.time_ns() // 1_000_000, key_b, value_b, hdrs)
        if len(record) > self.batch_bytes_max:
            raise RecordTooLarge(f"record of {len(record)} bytes exceeds batch_bytes_max={self.batch_bytes_max}")
        if partition is not None:
            partition = self._check_partition(topic, partition, count)
        else:
            partition = queue_partition(count, group, idempotency_key, key_b)
        sender = self._queue_sender or self._queue_path()
        return sender.send(topic, partition, count, (bytes(record), priority or 0, group or "", deliver_at_ms or 0,
                                                     idempotency_key or ""))

    def _queue_path(self) -> QueueSender:
        with self._cond:
            self._check_open()
            if self._queue_sender is None:
                self._queue_sender = QueueSender(self._transport.router, self.producer_id, **self._queue_options)
            return self._queue_sender

    def send_batch(self, topic: str, partition: int, records: Sequence[Any]) -> Future:
        """Send pre-built records to one partition as a single batch (bulk path, e.g. for benchmarks).

        `records` are values (bytes/str/None) or (key, value) pairs. They are encoded once, now, and go out
        as one ProduceRequest after any batch already queued for that partition. The future resolves to the
        RecordMetadata of the first record; record i got offset `metadata.offset + i`. Raises EmptyBatch,
        BatchTooLarge (encoded size above batch_bytes_max), UnknownPartition, Overloaded.
        """
        encoded = encode_bulk(records, self.batch_bytes_max)
        size = len(encoded[0])
        count = self._transport.partitions_for(topic)
        future = _accepted_future()
        with self._cond:
            self._check_open()
            self._check_partition(topic, partition, count)
            self._reserve(size)
            tp = (topic, partition)
            self._close_open_batch(tp)
            batch = self._new_batch(tp)
            batch.encoded, batch.bulk_future, batch.size_bytes, batch.closed = encoded, future, size, True
            self._cond.notify_all()
        return future

    def flush(self, timeout_s: float | None = None) -> None:
        """Send everything queued so far and wait for it to complete; RequestTimedOut after `timeout_s`."""
        with self._cond:
            target = next(self._batch_ids)
            self._flushing += 1
            self._cond.notify_all()
            try:
                done = self._cond.wait_for(lambda: not self._incomplete or min(self._incomplete) > target,
                                           timeout_s)
            finally:
                self._flushing -= 1
        if not done or (self._queue_sender is not None and not self._queue_sender.flush(timeout_s)):
            raise RequestTimedOut(f"flush did not complete within {timeout_s} s")

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, then stop the sender thread; records still unsent after `timeout_s` fail with RequestTimedOut."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
        try:
            self.flush(timeout_s)
        except RequestTimedOut as err:
            self._abort(err)
        finally:
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            self._thread.join(timeout=5)
            if self._queue_sender is not None:
                self._queue_sender.close(timeout_s)
            self._transport.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ accumulator (caller holds the lock)

    def _check_open(self) -> None:
        if self._closed:
            raise Unavailable("producer is closed")

    @staticmethod
    def _check_partition(topic: str, partition: int, count: int) -> int:
        if not isinstance(partition, int) or not 0 <= partition < count:
            raise UnknownPartition(f"topic {topic!r} has no partition {partition} (it has {count})")
        return partition

    def _sticky_partition(self, topic: str, count: int, size: int) -> int:
        """The topic's sticky partition; a record that would overflow its open batch closes that batch first
        and goes to the next partition (as Kafka's sticky partitioner does on a new batch)."""
        p, known = self._sticky.get(topic, (0, count))
        if known != count or p >= count:
            p = p % count
        self._sticky[topic] = (p, count)
        open_batch = self._open.get((topic, p))
        if open_batch is not None and open_batch.size_bytes + size > self.batch_bytes_max:
            self._close_open_batch((topic, p))
            p = self._sticky[topic][0]
        return p

    def _sticky_batch(self, topic: str, count: int, size: int) -> RecordBatch:
        """The open batch of the topic's sticky partition with room for `size` more bytes (opened if need be).
        send() reuses it while it stays open with room and the partition count stays `count`."""
        batch = self._open_batch((topic, self._sticky_partition(topic, count, size)), size)
        self._sticky_open[topic] = (batch, count)
        return batch

    def _open_batch(self, tp: tuple[str, int], size: int) -> RecordBatch:
        """The partition's open batch with room for `size` more bytes: a full one is closed, a new one opened."""
        batch = self._open.get(tp)
        if batch is not None and batch.size_bytes + size > self.batch_bytes_max:
            self._close_open_batch(tp)
            batch = None
        if batch is None:
            batch = self._open[tp] = self._new_batch(tp)
        return batch

    def _new_batch(self, tp: tuple[str, int]) -> RecordBatch:
        batch = RecordBatch(next(self._batch_ids), tp[0], tp[1], self._clock(), self.linger_s)
        lane = self._lanes.get(tp)
        if lane is None:
            lane = self._lanes[tp] = PartitionLane(self.producer_id, in_flight_max=self.max_in_flight_per_partition,
                                                   delivery_timeout_s=self.delivery_timeout_s)
        lane.queue.append(batch)
        self._incomplete.add(batch.id)
        return batch

    def _close_open_batch(self, tp: tuple[str, int]) -> None:
        batch = self._open.pop(tp, None)
        if batch is None:
            return
        batch.closed = True
        topic, partition = tp
        sticky = self._sticky.get(topic)
        if sticky is not None and sticky[0] == partition:
            self._sticky[topic] = ((partition + 1) % sticky[1], sticky[1])

    def _taken(self, batch: RecordBatch) -> None:
        """A batch leaves for the network: it takes no more records (lock held)."""
        if self._open.get((batch.topic, batch.partition)) is batch:
            self._close_open_batch((batch.topic, batch.partition))
        batch.closed = True

    def _take_at_once(self, batch: RecordBatch) -> bool:
        """With linger 0, a new batch of an idle partition (nothing in flight, failed or queued before it) is sent
        from the caller's thread, saving the hand-off to the sender thread, unless another thread is sending
        right now. True when the caller took it (and holds `_dispatching` until it has sent it). Lock held."""
        lane = self._lanes[(batch.topic, batch.partition)]
        if self.linger_s or not lane.idle() or lane.queue[0] is not batch:
            return False
        if not self._dispatching.acquire(blocking=False):
            return False
        self._taken(lane.send_head())
        return True

    # ------------------------------------------------------------------ sender thread

    def _sender_idle(self) -> bool:
        return not self._incomplete or not any(lane.queue or lane.in_flight for lane in self._lanes.values())

    def _dispatch(self, batch: RecordBatch) -> None:
        blob, count, max_ts = batch.encode()
        request = pb.ProduceRequest(
            request_id=next(self._request_ids), topic=batch.topic, partition=batch.partition,
            producer_id=batch.producer_id, base_sequence=batch.sequence if self.idempotent else 0,
            record_count=count, max_timestamp_ms=max_ts, records=blob,
        )
        attempt = batch.attempts
        try:
            self._transport.send(request, lambda response, err: self._on_done(batch, attempt, response, err))
        except RaftbusError as err:
            self._on_done(batch, attempt, None, err)
        except Exception as exc:  # a transport bug must not kill the sender thread
            self._on_done(batch, attempt, None, Unavailable(f"produce failed: {exc!r}"))

    def _on_done(self, batch: RecordBatch, attempt: int, response: pb.ProduceResponse | None,
                 err: RaftbusError | None) -> None:
        """Send `attempt` of a batch was answered: its lane decides, this thread carries it out."""
        tp = (batch.topic, batch.partition)
        if err is None:
            with self._cond:
                actions = self._lanes[tp].acked(batch, attempt, response)
                self._apply(tp, actions)
        else:
            now_s = self._clock()
            delay_s = None if self._stopping else \
                self._transport.retry_delay_s(err, batch.attempts, batch.topic, batch.partition)
            with self._cond:
                actions = self._lanes[tp].refused(batch, attempt, err, now_s, delay_s)
                self._apply(tp, actions)
        self._settle(actions)

    def _apply(self, tp: tuple[str, int], actions: list) -> None:
        """The lane's decisions that change the producer's state (lock held): settled batches give their bytes
        back, a restart takes a fresh producer id, and the sender thread looks again. The futures settle outside
        the lock (`_settle`)."""
        for action in actions:
            if action is RENEW:
                self._lanes[tp].renew(self._new_producer_id())
            else:
                self._buffer_used_bytes -= action.batch.size_bytes
        self._cond.notify_all()  # room in the buffer, or batches to (re)send

    def _settle(self, actions: list) -> None:
        """Settle the batches the lane completed or failed, then stop counting them as incomplete: `flush()`
        returns only once every future it waited for is done (and its callbacks have run)."""
        if not actions:
            return
        for action in actions:
            if type(action) is Complete:
                action.batch.resolve(action.answer.base_offset)
            elif action is not RENEW:
                action.batch.fail(action.error)
        with self._cond:
            for action in actions:
                if action is not RENEW:
                    self._incomplete.discard(action.batch.id)
            self._cond.notify_all()

    def _new_producer_id(self) -> bytes:
        return os.urandom(settings.PRODUCER_ID_BYTES) if self.idempotent else b""

    def _abort(self, err: RaftbusError) -> None:
        """Fail every batch not yet in flight (close() after its flush timed out)."""
        failure = RequestTimedOut(f"producer closed before delivery: {err.message}")
        with self._cond:
            dropped = [fail for lane in self._lanes.values() for fail in lane.abandon(failure)]
            self._open.clear()
            for fail in dropped:
                self._buffer_used_bytes -= fail.batch.size_bytes
        self._settle(dropped)
