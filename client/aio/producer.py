"""AsyncProducer: the sync Producer's batching, ordering and idempotence on one asyncio event loop.

    async with AsyncProducer("127.0.0.1:7070") as producer:
        meta = await producer.send("orders", b"value", key=b"k")   # acked: committed on a majority

Records go into per-partition batches (the sync SDK's batch and record codecs) that close at
`batch_bytes_max` or after `linger_ms`; keys pick partitions by murmur2, keyless records a sticky partition.
Each partition is a lane, the PartitionLane that the sync Producer drives too (client/producer_lane.py): up to
`max_in_flight_per_partition` batches on the broker's produce stream, each with the producer id and its
`base_sequence`, fixed when first sent and kept on every retry, so the broker drops a retried batch it already
appended and answers with the original offsets. A failed batch stops its lane until every batch in flight
there has answered; the failed ones then go again in sequence order. A batch that fails for good (non-retriable
error, or `delivery_timeout_ms` spent) fails its records, and the lane starts over under a fresh producer id
with sequences from 0; a partition that forgot the producer (UNKNOWN_PRODUCER_ID) restarts the lane the same way
without failing anything. Queue topics take the same path with message batches sent as idempotent Enqueue calls,
one at a time per partition (client/aio/queue_batches.py).
"""
from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from raftbus.client import settings
from raftbus.client.credentials import TlsSource
from raftbus.client.errors import InvalidArgument, Overloaded, RaftbusError, RecordTooLarge, RequestTimedOut, \
    Unavailable, WrongTopicKind
from raftbus.client.murmur2 import partition_for_key
from raftbus.client.producer import Producer, _Batch, encode_bulk, normalize_headers, reject_queue_options, to_bytes
from raftbus.client.producer_lane import RENEW, Complete, PartitionLane
from raftbus.client.records import RECORD_OVERHEAD_BYTES, RecordMetadata, record_size
from raftbus.client.wire import queues_pb2 as qpb
from raftbus.client.wire import raftbus_pb2 as pb

from raftbus.client.aio.lifecycle import AsyncClient
from raftbus.client.aio.produce_stream import AsyncProduceStreams
from raftbus.client.aio.queue_batches import MessageBatch, enqueue, message_of
from raftbus.client.aio.router import AsyncRouter
from raftbus.client.aio.shared import MessageMetadata, queue_partition


class _Lane(PartitionLane):
    """One partition's PartitionLane, with the batch being filled and the timer of the next due batch."""

    __slots__ = ("topic", "partition", "batch_type", "records_max", "open", "timer")

    def __init__(self, topic: str, partition: int, producer_id: bytes, batch_type: type[_Batch], in_flight_max: int,
                 records_max: int, delivery_timeout_s: float):
        super().__init__(producer_id, in_flight_max=in_flight_max, delivery_timeout_s=delivery_timeout_s)
        self.topic, self.partition = topic, partition
        self.batch_type, self.records_max = batch_type, records_max
        self.open: _Batch | None = None
        self.timer: asyncio.TimerHandle | None = None


class AsyncProducer(AsyncClient):
    """Sends records to stream and queue topics from asyncio code; see the module docstring."""

    def __init__(self, bootstrap: str | list[str] | None = None, *, linger_ms: int = settings.LINGER_MS,
                 batch_bytes_max: int = settings.BATCH_BYTES_MAX, buffer_bytes_max: int = settings.BUFFER_BYTES_MAX,
                 request_timeout_ms: int = settings.REQUEST_TIMEOUT_MS, retries: int = settings.RETRIES,
                 retry_backoff_ms: int = settings.RETRY_BACKOFF_MS,
                 delivery_timeout_ms: int = settings.DELIVERY_TIMEOUT_MS, max_block_ms: int = settings.MAX_BLOCK_MS,
                 metadata_max_age_ms: int = settings.METADATA_MAX_AGE_MS, idempotent: bool = settings.IDEMPOTENT,
                 max_in_flight_per_partition: int = settings.MAX_IN_FLIGHT_PER_PARTITION,
                 tls_ca: TlsSource = None, tls_cert: TlsSource = None, tls_key: TlsSource = None,
                 token: str | None = None):
        if batch_bytes_max <= 0 or buffer_bytes_max < batch_bytes_max:
            raise InvalidArgument("need 0 < batch_bytes_max <= buffer_bytes_max")
        if not 1 <= max_in_flight_per_partition <= settings.MAX_IN_FLIGHT_PER_PARTITION_MAX:
            raise InvalidArgument(f"max_in_flight_per_partition must be 1..{settings.MAX_IN_FLIGHT_PER_PARTITION_MAX} "
                                  "(the broker remembers that many batches per producer for retries)")
        self.router = AsyncRouter(bootstrap, request_timeout_ms=request_timeout_ms, retries=retries,
                                  tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token,
                                  retry_backoff_ms=retry_backoff_ms, metadata_max_age_ms=metadata_max_age_ms)
        self.batch_bytes_max, self.buffer_bytes_max = batch_bytes_max, buffer_bytes_max
        self.linger_s, self.delivery_timeout_s, self.max_block_s = (ms / 1000 for ms in (
            linger_ms, delivery_timeout_ms, max_block_ms))
        self.idempotent, self.max_in_flight = idempotent, max_in_flight_per_partition
        self.producer_id = self._new_producer_id()
        self._streams = AsyncProduceStreams(self.router)
        self._lanes: dict[tuple[str, int], _Lane] = {}
        self._sticky: dict[str, int] = {}
        self._shapes: dict[str, tuple[object, tuple[str, int]]] = {}  # topic -> (map read, (kind, partitions))
        self._incomplete: dict[int, _Batch] = {}
        self._batch_ids = itertools.count(1)
        self._request_ids = itertools.count(1)
        self._buffered_bytes = 0
        self._changed = asyncio.Event()  # set whenever a batch settles (flush and blocked senders re-check)
        self._tasks: set[asyncio.Task] = set()
        self._flushing = 0
        self._closed = False

    # ------------------------------------------------------------------ public API

    async def send(self, topic: str, value: bytes | str | None, key: bytes | str | None = None,
                   headers: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None, partition: int | None = None,
                   **queue_fields) -> RecordMetadata | MessageMetadata:
        """Send one record and wait until its partition acknowledges it (committed on a majority); see enqueue."""
        if key is None and partition is None and not headers and not queue_fields and type(value) is bytes:
            future = self._append_to_open(topic, value)
            if future is not None:
                return await future
        return await (await self._enqueue_whole(topic, value, key, headers, partition, **queue_fields))

    async def enqueue(self, topic: str, value: bytes | str | None, key: bytes | str | None = None,
                      headers: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
                      partition: int | None = None, priority: int | None = None, group: str | None = None,
                      deliver_at_ms: int | None = None, idempotency_key: str | None = None) -> asyncio.Future:
        """Queue one record without waiting for its ack; the future resolves to its RecordMetadata.

        On a queue topic the future resolves to MessageMetadata and priority, group, deliver_at_ms and
        idempotency_key apply; on a stream topic they are refused (WrongTopicKind). Raises at once:
        InvalidArgument (bad types), RecordTooLarge, UnknownTopic, UnknownPartition, and Overloaded when the
        buffer stays full for `max_block_ms`.
        """
        if key is None and partition is None and not headers and priority is None and group is None \
                and deliver_at_ms is None and idempotency_key is None and type(value) is bytes:
            future = self._append_to_open(topic, value)
            if future is not None:
                return future
        return await self._enqueue_whole(topic, value, key, headers, partition, priority, group, deliver_at_ms,
                                         idempotency_key)

    async def _enqueue_whole(self, topic: str, value, key=None, headers=None, partition: int | None = None,
                             priority: int | None = None, group: str | None = None, deliver_at_ms: int | None = None,
                             idempotency_key: str | None = None) -> asyncio.Future:
        """enqueue() for every record _append_to_open does not take."""
        value_b, key_b, hdrs = to_bytes(value, "value"), to_bytes(key, "key"), normalize_headers(headers)
        size = record_size(key_b, value_b, hdrs)
        if size > self.batch_bytes_max:
            raise RecordTooLarge(f"record of {size} bytes exceeds batch_bytes_max={self.batch_bytes_max}")
        kind, count = await self._topic_shape(topic)
        if partition is not None:
            partition = Producer._check_partition(topic, partition, count)
        now_ms = time.time_ns() // 1_000_000
        if kind == "queue":
            message, size = message_of(now_ms, key_b, value_b, hdrs, priority, group, deliver_at_ms, idempotency_key)
            if partition is None:
                partition = queue_partition(count, group, idempotency_key, key_b)
            return await self._add(topic, partition, count, message, size, MessageBatch)
        reject_queue_options(priority, group, deliver_at_ms, idempotency_key, topic=topic)
        if partition is None and key_b is not None:
            partition = partition_for_key(key_b, count)
        return await self._add(topic, partition, count, (now_ms, key_b, value_b, hdrs), size, _Batch)

    def _append_to_open(self, topic: str, value: bytes) -> asyncio.Future | None:
        """The common record (a keyless bytes value, no headers, to a stream topic whose shape is known and fresh)
        appended to its sticky partition's open batch when that batch and the buffer have room: what _add would do
        there, without its coroutine calls (an open batch always holds its first record, added by _add, which
        started its linger). None: take enqueue's whole path (a new batch, a full one, a full buffer, a closed
        producer, a queue topic included)."""
        known = self._shapes.get(topic)
        if known is None or self._closed or known[0] is not self.router.fresh_map() or known[1][0] != "stream":
            return None
        chosen = self._sticky.get(topic)
        lane = self._lanes.get((topic, chosen))
        batch = None if lane is None or chosen >= known[1][1] else lane.open
        size = RECORD_OVERHEAD_BYTES + len(value)
        if batch is None or batch.size_bytes + size >= self.batch_bytes_max \
                or self._buffered_bytes + size > self.buffer_bytes_max:
            return None
        self._buffered_bytes += size
        future = asyncio.get_running_loop().create_future()
        batch.records.append((time.time_ns() // 1_000_000, None, value, ()))
        batch.futures.append(future)
        batch.size_bytes += size
        return future

    async def _add(self, topic: str, partition: int | None, count: int, item, size: int,
                   batch_type: type[_Batch]) -> asyncio.Future:
        """Append one record (or queue message) to its partition's open batch; its future settles on the ack."""
        await self._reserve(size)
        lane = self._lane(topic, self._sticky_partition(topic, count, size) if partition is None else partition,
                          batch_type)
        batch = lane.open
        if batch is None or batch.size_bytes + size > self.batch_bytes_max or len(batch.records) >= lane.records_max:
            batch = self._open_batch(lane)
        future = asyncio.get_running_loop().create_future()
        if batch.add(item, future, size, self.batch_bytes_max):
            self._close_open(lane)
        if len(batch.records) == 1:  # the first record: start the batch's linger
            self._pump(lane)
        elif batch.closed:  # full: send it, and let the loop run so a tight loop of enqueues keeps batches moving
            self._pump(lane)
            await asyncio.sleep(0)
        return future

    async def send_batch(self, topic: str, partition: int, records: Sequence[Any]) -> RecordMetadata:
        """Send pre-built records (values or (key, value) pairs) to one partition as one batch and wait for the
        ack; the RecordMetadata is the first record's, record i got offset `metadata.offset + i`."""
        encoded = encode_bulk(records, self.batch_bytes_max)
        kind, count = await self._topic_shape(topic)
        if kind == "queue":
            raise WrongTopicKind(f"{topic!r} is a queue topic; send_batch writes stream topics (send each message)")
        Producer._check_partition(topic, partition, count)
        await self._reserve(len(encoded[0]))
        lane = self._lane(topic, partition, _Batch)
        self._close_open(lane)
        batch = self._open_batch(lane)
        self._close_open(lane)
        batch.encoded, batch.size_bytes = encoded, len(encoded[0])
        batch.bulk_future = asyncio.get_running_loop().create_future()
        self._pump(lane)
        return await batch.bulk_future

    async def flush(self, timeout_s: float | None = None) -> None:
        """Send everything queued so far and wait for its answers; RequestTimedOut after `timeout_s`."""
        target = next(self._batch_ids)
        self._flushing += 1
        try:
            for lane in self._lanes.values():
                self._pump(lane)
            async with asyncio.timeout(timeout_s):
                await self._wait_for(lambda: not self._incomplete or min(self._incomplete) > target)
        except TimeoutError:
            raise RequestTimedOut(f"flush did not complete within {timeout_s} s") from None
        finally:
            self._flushing -= 1

    async def close(self, timeout_s: float | None = None) -> None:
        """Flush, then close the streams; records still unsent after `timeout_s` fail with RequestTimedOut."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.flush(timeout_s)
        except RequestTimedOut as err:
            self._abort(err)
        for lane in self._lanes.values():
            if lane.timer is not None:
                lane.timer.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._streams.close()
        await self.router.close()

    # ------------------------------------------------------------------ accumulating

    async def _topic_shape(self, topic: str) -> tuple[str, int]:
        """The topic's kind and partition count: from the router's current map while it is fresh (no coroutine
        call per record), else after refreshing it; UnknownTopic when there is no such topic."""
        if self._closed:
            raise Unavailable("producer is closed")
        known, cluster = self._shapes.get(topic), self.router.fresh_map()
        if known is not None and cluster is not None and known[0] is cluster:
            return known[1]
        shape = await self.router.topic_kind(topic), await self.router.partitions_for(topic)
        self._shapes[topic] = (self.router.fresh_map(), shape)
        return shape

    def _new_producer_id(self) -> bytes:
        return os.urandom(settings.PRODUCER_ID_BYTES) if self.idempotent else b""

    async def _wait_for(self, predicate) -> None:
        while not predicate():
            self._changed.clear()
            await self._changed.wait()

    async def _reserve(self, size: int) -> None:
        if self._buffered_bytes + size > self.buffer_bytes_max:
            try:
                async with asyncio.timeout(self.max_block_s):
                    await self._wait_for(lambda: self._buffered_bytes + size <= self.buffer_bytes_max)
            except TimeoutError:
                raise Overloaded(f"producer buffer full ({self.buffer_bytes_max} bytes) for {self.max_block_s} s") \
                    from None
        self._buffered_bytes += size

    def _lane(self, topic: str, partition: int, batch_type: type[_Batch]) -> _Lane:
        lane = self._lanes.get((topic, partition))
        if lane is None:
            queue = batch_type is MessageBatch  # Enqueue is unary: one batch at a time keeps sequences in order
            lane = self._lanes[(topic, partition)] = _Lane(
                topic, partition, self.producer_id, batch_type, 1 if queue else self.max_in_flight,
                settings.QUEUE_BATCH_MESSAGES_MAX if queue else self.batch_bytes_max, self.delivery_timeout_s)
        return lane

    def _sticky_partition(self, topic: str, count: int, size: int) -> int:
        """The topic's sticky partition; moves on when its open batch cannot take `size` more bytes."""
        chosen = self._sticky.get(topic, 0) % count
        lane = self._lanes.get((topic, chosen))
        if lane is not None and lane.open is not None and lane.open.size_bytes + size > self.batch_bytes_max:
            self._close_open(lane)
            chosen = self._sticky[topic] % count
        self._sticky[topic] = chosen
        return chosen

    def _open_batch(self, lane: _Lane) -> _Batch:
        self._close_open(lane)
        batch = lane.batch_type(next(self._batch_ids), lane.topic, lane.partition, time.monotonic(), self.linger_s)
        lane.open = batch
        lane.queue.append(batch)
        self._incomplete[batch.id] = batch
        return batch

    def _close_open(self, lane: _Lane) -> None:
        if lane.open is None:
            return
        lane.open.closed, lane.open = True, None
        if self._sticky.get(lane.topic) == lane.partition:
            self._sticky[lane.topic] = lane.partition + 1

    # ------------------------------------------------------------------ sending

    def _pump(self, lane: _Lane) -> None:
        """Send what the lane lets go now, in order; wake up when its next batch falls due."""
        if not lane.queue:
            return
        sent, wake_at_s = lane.take(time.monotonic(), self._due_s)
        for batch in sent:
            if lane.open is batch:
                self._close_open(lane)
            task = asyncio.get_running_loop().create_task(self._attempt(lane, batch, batch.attempts))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if wake_at_s is not None:
            self._wake_at(lane, wake_at_s)

    def _due_s(self, batch: _Batch, queued: int) -> float:
        """When a never-sent head batch may go (the lane's DueS): at once when closed, flushed, closing or with
        another batch behind it, else after its linger."""
        if batch.closed or self._flushing or self._closed or queued > 1:
            return 0.0
        return batch.linger_until_s

    def _wake_at(self, lane: _Lane, at_s: float) -> None:
        if lane.timer is not None:
            lane.timer.cancel()
        delay_s = max(0.0, at_s - time.monotonic())
        lane.timer = asyncio.get_running_loop().call_later(delay_s, self._pump, lane)

    async def _attempt(self, lane: _Lane, batch: _Batch, attempt: int) -> None:
        """Send `attempt` of `batch`; its lane decides what the answer means, this task carries it out."""
        sequence = batch.sequence if self.idempotent else 0
        try:
            if isinstance(batch, MessageBatch):
                answer = await enqueue(self.router, qpb.EnqueueRequest(
                    request_id=next(self._request_ids), topic=lane.topic, partition=lane.partition,
                    producer_id=batch.producer_id, base_sequence=sequence, messages=batch.records))
            else:
                blob, count, max_ts = batch.encode()
                answer = await self._streams.produce(pb.ProduceRequest(
                    request_id=next(self._request_ids), topic=lane.topic, partition=lane.partition,
                    producer_id=batch.producer_id, base_sequence=sequence, record_count=count,
                    max_timestamp_ms=max_ts, records=blob))
        except RaftbusError as err:
            actions = self._refused(lane, batch, attempt, err)
        except Exception as exc:  # a transport bug must fail the batch, not leave it in flight forever
            actions = self._refused(lane, batch, attempt, Unavailable(f"produce failed: {exc!r}"))
        else:
            actions = lane.acked(batch, attempt, answer)
        for action in actions:
            if action is RENEW:
                lane.renew(self._new_producer_id())
                continue
            if type(action) is not Complete:
                action.batch.fail(action.error)
            elif isinstance(action.batch, MessageBatch):
                action.batch.settle(action.answer)
            else:
                action.batch.resolve(action.answer.base_offset)
            self._settled(action.batch)
        self._pump(lane)

    def _refused(self, lane: _Lane, batch: _Batch, attempt: int, err: RaftbusError) -> list:
        delay_s = self.router.produce_retry_delay_s(err, batch.attempts, topic=lane.topic, partition=lane.partition)
        return lane.refused(batch, attempt, err, time.monotonic(), delay_s)

    def _settled(self, batch: _Batch) -> None:
        """The batch's futures are settled: give back its bytes and wake flush() and blocked senders."""
        self._buffered_bytes -= batch.size_bytes
        self._incomplete.pop(batch.id, None)
        self._changed.set()

    def _abort(self, err: RaftbusError) -> None:
        """Fail every batch not yet in flight (close() after its flush timed out)."""
        failure = RequestTimedOut(f"producer closed before delivery: {err.message}")
        for lane in self._lanes.values():
            lane.open = None
            for fail in lane.abandon(failure):
                fail.batch.fail(fail.error)
                self._settled(fail.batch)
