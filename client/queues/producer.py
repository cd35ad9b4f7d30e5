"""Enqueueing to queue topics for the Producer: per-partition batches sent as Queue.Enqueue from one thread.

The same rules as the stream path: batches close at batch_bytes_max, QUEUE_BATCH_MESSAGES_MAX messages or after
linger_ms; one batch per partition is in flight at a time (Enqueue is a unary call); each partition's batches go
through a PartitionLane (client/producer_lane.py), so an idempotent producer tags each batch with its id and the
partition's message sequence, a retried batch is not enqueued twice and answers with the original ids, and after
a batch fails for good the partition starts over under a fresh producer id.
A message goes to its explicit partition, else by murmur2 of its group, else of its idempotency key (so a
retried key meets its original), else of its record key, else to the topic's sticky partition.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import grpc

from raftbus.client import settings
from raftbus.client.errors import RaftbusError, Unavailable, error_from_rpc
from raftbus.client.murmur2 import partition_for_key
from raftbus.client.queues.messages import MessageMetadata
from raftbus.client.producer_lane import RENEW, Complete, PartitionLane
from raftbus.client.record_future import BatchOutcome, RecordFuture
from raftbus.client.router import Router
from raftbus.client.sender import PendingBatch, SenderCore
from raftbus.client.wire import queues_pb2 as qpb
from raftbus.client.wire import queues_pb2_grpc as qpb_grpc


def queue_partition(count: int, group: str | None, idempotency_key: str | None, key: bytes | None) -> int | None:
    """The partition a routing field picks, or None for the sticky partition."""
    for field in (group, idempotency_key):
        if field:
            return partition_for_key(field.encode(), count)
    return partition_for_key(key, count) if key is not None else None


class QueueStubs:
    """Queue service stubs over the router's pooled channels."""

    def __init__(self, router: Router):
        self.router = router
        self._lock = threading.Lock()
        self._stubs: dict[str, qpb_grpc.QueueStub] = {}

    def __call__(self, conn) -> qpb_grpc.QueueStub:
        with self._lock:
            stub = self._stubs.get(conn.address)
            if stub is None:
                stub = self._stubs[conn.address] = qpb_grpc.QueueStub(conn.channel)
            return stub

    def for_partition(self, topic: str, partition: int) -> qpb_grpc.QueueStub:
        return self(self.router.connection(self.router.leader_address(topic, partition)))


class _QueueOutcome(BatchOutcome):
    """How one Enqueue batch ended: the broker's answer (one result per message) or an error."""

    __slots__ = ("results", "enqueued_ms")

    def __init__(self, topic: str, partition: int):
        super().__init__(topic, partition)
        self.results = ()
        self.enqueued_ms = 0

    def answer(self, response: qpb.EnqueueResponse) -> None:
        self.results, self.enqueued_ms = response.results, response.enqueued_ms
        self.settle(0, None)


class MessageFuture(RecordFuture):
    """One message's future: a view of its batch's answer (client/record_future.py); its result is the
    message's MessageMetadata."""

    __slots__ = ()

    def result(self, timeout: float | None = None) -> MessageMetadata:
        outcome = self._wait(timeout)
        if outcome.error is not None:
            raise outcome.error
        answer = outcome.results[self._index]
        return MessageMetadata(outcome.topic, outcome.partition, answer.message_id, answer.duplicate,
                               outcome.enqueued_ms)


class _QueueBatch(PendingBatch):
    """Messages bound for one partition, as (record, priority, group, deliver_at_ms, idempotency_key) tuples;
    the EnqueueRequest is built when the batch first goes out and kept for its retries."""

    __slots__ = ("messages", "outcome", "request", "partition_count")

    def __init__(self, topic: str, partition: int, now_s: float, linger_s: float, partition_count: int):
        super().__init__(topic, partition, now_s, linger_s)
        self.partition_count = partition_count  # the topic's, when the batch opened (for the sticky partition)
        self.messages: list[tuple] = []
        self.outcome = _QueueOutcome(topic, partition)
        self.request: qpb.EnqueueRequest | None = None

    def record_count(self) -> int:
        return len(self.messages)

    def fail(self, err: BaseException) -> None:
        self.outcome.settle(-1, err)


class QueueSender(SenderCore):
    """Enqueue batches of one producer: one batch in flight per partition, tagged with the producer's id and the
    partition's message sequence."""

    def __init__(self, router: Router, producer_id: bytes, *, linger_ms: int, batch_bytes_max: int,
                 buffer_bytes_max: int, delivery_timeout_ms: int, max_block_ms: int,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(linger_ms=linger_ms, batch_bytes_max=batch_bytes_max, buffer_bytes_max=buffer_bytes_max,
                         delivery_timeout_ms=delivery_timeout_ms, max_block_ms=max_block_ms, clock=clock)
        self.router = router
        self.stubs = QueueStubs(router)
        self.producer_id = producer_id
        self._sticky: dict[str, int] = {}
        self._request_ids = itertools.count(1)
        self._pending = 0
        self._start_sender("raftbus-queue-sender")

    # ------------------------------------------------------------------ callers
    def send(self, topic: str, partition: int | None, count: int, message: tuple) -> Future:
        """Queue one message, (record, priority, group, deliver_at_ms, idempotency_key), for `partition` (None:
        the sticky one); the future resolves to MessageMetadata. The sender thread is woken only when a batch
        opens or closes: a message joining an open batch changes nothing it waits for."""
        size = len(message[0]) + len(message[2]) + len(message[4]) + 32
        with self._lock:
            if self._stopping:
                raise Unavailable("producer is closed")
            if self._buffer_used_bytes + size <= self.buffer_bytes_max:
                self._buffer_used_bytes += size
            else:
                self._reserve(size)
            if partition is None:
                partition = self._sticky.setdefault(topic, 0) % count
            tp = (topic, partition)
            batch = self._open.get(tp)
            wake = False
            if batch is not None and (batch.size_bytes + size > self.batch_bytes_max
                                      or len(batch.messages) >= settings.QUEUE_BATCH_MESSAGES_MAX):
                self._close(tp, count)
                batch, wake = None, True
            if batch is None:
                batch = self._open[tp] = _QueueBatch(topic, partition, self._clock(), self.linger_s, count)
                self._lane(tp).queue.append(batch)
                wake = True
            index = len(batch.messages)
            batch.messages.append(message)
            batch.size_bytes += size
            self._pending += 1
            if wake:
                self._cond.notify_all()
            return MessageFuture(batch.outcome, index, 0)

    def flush(self, timeout_s: float | None = None) -> bool:
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: self._pending == 0, timeout_s)
            finally:
                self._flushing -= 1

    def close(self, timeout_s: float | None = None) -> None:
        self.flush(timeout_s)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(5)
        with self._cond:
            left = [fail for lane in self._lanes.values()
                    for fail in lane.abandon(Unavailable("producer closed before the message was enqueued"))]
            self._open.clear()
        for fail in left:
            fail.batch.fail(fail.error)

    # ------------------------------------------------------------------ accumulator (lock held)
    def _close(self, tp: tuple[str, int], count: int | None = None) -> None:
        batch = self._open.pop(tp, None)
        if batch is None:
            return
        batch.closed = True
        topic, partition = tp
        if count and self._sticky.get(topic, 0) % count == partition:
            self._sticky[topic] = (partition + 1) % count

    def _lane(self, tp: tuple[str, int]) -> PartitionLane:
        lane = self._lanes.get(tp)
        if lane is None:
            lane = self._lanes[tp] = PartitionLane(self.producer_id, delivery_timeout_s=self.delivery_timeout_s)
        return lane

    def _taken(self, batch: _QueueBatch) -> None:
        """A batch leaves for the network: it takes no more messages, and the topic's sticky partition moves on
        (as on a full batch), so keyless messages spread over the partitions batch by batch."""
        tp = (batch.topic, batch.partition)
        if self._open.get(tp) is batch:
            self._close(tp, batch.partition_count)
        batch.closed = True

    # ------------------------------------------------------------------ sender thread
    def _sender_idle(self) -> bool:
        return not any(lane.in_flight for lane in self._lanes.values())

    def _dispatch(self, batch: _QueueBatch) -> None:
        request = batch.request
        if request is None:
            request = batch.request = qpb.EnqueueRequest(topic=batch.topic, partition=batch.partition)
            add = request.messages.add
            for record, priority, group, deliver_at_ms, idempotency_key in batch.messages:
                add(record=record, priority=priority, group=group, deliver_at_ms=deliver_at_ms,
                    idempotency_key=idempotency_key)
        request.request_id = next(self._request_ids)
        request.producer_id, request.base_sequence = batch.producer_id, batch.sequence  # new after a restart
        attempt = batch.attempts
        try:
            call = self.stubs.for_partition(batch.topic, batch.partition).Enqueue.future(
                request, timeout=self.router.request_timeout_s)
        except grpc.RpcError as exc:
            self._done(batch, attempt, None, error_from_rpc(exc))
            return
        except RaftbusError as err:
            self._done(batch, attempt, None, err)
            return

        def on_done(f) -> None:
            try:
                response = f.result()
            except grpc.RpcError as exc:
                self._done(batch, attempt, None, error_from_rpc(exc))
            except Exception as exc:  # a cancelled call (channel closed)
                self._done(batch, attempt, None, Unavailable(f"enqueue call ended: {exc!r}"))
            else:
                self._done(batch, attempt, response, None)

        call.add_done_callback(on_done)

    def _done(self, batch: _QueueBatch, attempt: int, response, err: RaftbusError | None) -> None:
        """Send `attempt` of a batch was answered: its lane decides, this thread carries it out."""
        tp = (batch.topic, batch.partition)
        if err is None:
            with self._cond:
                actions = self._lanes[tp].acked(batch, attempt, response)
                self._apply(tp, actions)
        else:
            now_s = self._clock()
            delay_s = None if self._stopping else self.router.produce_retry_delay_s(
                err, batch.attempts, topic=batch.topic, partition=batch.partition)
            with self._cond:
                actions = self._lanes[tp].refused(batch, attempt, err, now_s, delay_s)
                self._apply(tp, actions)
        for action in actions:
            if type(action) is Complete:
                action.batch.outcome.answer(action.answer)
            elif action is not RENEW:
                action.batch.fail(action.error)
            if action is not RENEW:
                self._settled(action.batch)

    def _apply(self, tp: tuple[str, int], actions: list) -> None:
        """Give back settled batches' bytes; start over under a fresh producer id on RENEW (lock held)."""
        for action in actions:
            if action is RENEW:
                self._lanes[tp].renew(os.urandom(len(self.producer_id)) if self.producer_id else b"")
            else:
                self._buffer_used_bytes -= action.batch.size_bytes
        self._cond.notify_all()

    def _settled(self, batch: _QueueBatch) -> None:
        """The batch's futures are done: only now may flush() stop waiting for it."""
        with self._cond:
            self._pending -= len(batch.messages)
            self._cond.notify_all()

