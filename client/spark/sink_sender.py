"""Sends one Spark task's records to stream partitions as a replayable sequence of idempotent batches.

The task's records for a partition are cut into batches in arrival order, a batch closing when the next
record would take it past `batch_bytes_max`; every batch carries the task's producer id (sink_identity) and
`base_sequence` = the records of that partition before it. Given the same rows in the same order, a
replayed task therefore sends exactly the batches its first attempt sent, and the broker recognises them:

- a batch among the producer's last 5 batches on that partition is answered as a duplicate (not appended);
- a batch older than those is answered OUT_OF_ORDER_SEQUENCE. One batch per partition is in flight and the
  batches before it were all acknowledged, so the broker's next expected sequence is at least this batch's
  base; it refused it, so it expects more: an earlier attempt appended this batch. It counts as written.
- the first batch past what the earlier attempt wrote is appended.

Each partition's batches go through a PartitionLane (client/producer_lane.py) with `replayed=True`, the rules
the SDK's producers follow too. Other retriable errors (leader moves, timeouts) resend the same batch with the
same sequence after the router's backoff, until `delivery_timeout_ms` after the batch was cut (then the task
fails with REQUEST_TIMED_OUT); anything else fails the task. A partition that forgot the task's producer id
(UNKNOWN_PRODUCER_ID: idle past the broker's `producer_idle_ms`) goes on under a fresh random producer id from
sequence 0: a replay cannot be recognised there any more, whatever id it used. The task's thread does all the
work; produce-stream callbacks only hand answers over through a queue.
"""
from __future__ import annotations

import os
import queue
import time
from dataclasses import dataclass

from raftbus.client import settings
from raftbus.client.errors import RaftbusError, RequestTimedOut
from raftbus.client.producer_lane import RENEW, Complete, LaneBatch, PartitionLane
from raftbus.client.records import encode_stream_batch
from raftbus.client.wire import raftbus_pb2 as pb

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class WriteCounts:
    """What a task's writes came to: records appended by this attempt, and records the brokers already held
    (appended by an earlier attempt, or by this one when an answer was lost and the batch went again)."""

    appended: int = 0
    already_written: int = 0
    batches: int = 0

    def add(self, other: "WriteCounts") -> None:
        self.appended += other.appended
        self.already_written += other.already_written
        self.batches += other.batches


class _Batch(LaneBatch):
    """One produce batch of the task, cut when it closed; encoded once, on its first send."""

    __slots__ = ("tp", "records", "size_bytes", "encoded")

    def __init__(self, tp: TopicPartition, records: list, size_bytes: int, now_s: float):
        super().__init__(now_s)
        self.tp = tp
        self.records = records
        self.size_bytes = size_bytes
        self.encoded: tuple[bytes, int, int] | None = None

    def record_count(self) -> int:
        return len(self.records)


class _Partition(PartitionLane):
    """One partition's lane and the batch being filled."""

    __slots__ = ("records", "size_bytes")

    def __init__(self, producer_id: bytes, delivery_timeout_s: float):
        super().__init__(producer_id, in_flight_max=1, delivery_timeout_s=delivery_timeout_s, replayed=True)
        self.records: list = []
        self.size_bytes = 0


def _at_once(batch: _Batch, queued: int) -> float:
    return 0.0  # a batch is queued only once cut: it goes as soon as its lane lets it


class SequencedSender:
    """Deterministic idempotent batches over a produce transport (see the module docstring)."""

    def __init__(self, transport, producer_id: bytes, batch_bytes_max: int, buffer_bytes_max: int,
                 delivery_timeout_ms: int, clock=time.monotonic):
        self._transport = transport
        self._producer_id = producer_id
        self._batch_bytes_max = batch_bytes_max
        self._buffer_bytes_max = buffer_bytes_max
        self._delivery_timeout_s = delivery_timeout_ms / 1000
        self._clock = clock
        self._lanes: dict[TopicPartition, _Partition] = {}
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        self._buffered_bytes = 0
        self._request_ids = iter(range(1, 2**63))
        self.counts = WriteCounts()

    def add(self, tp: TopicPartition, record: tuple, size_bytes: int) -> bool:
        """Append one record (timestamp_ms, key, value, headers) to the partition's open batch; True when
        that batch closed before it (the record starts a new one)."""
        lane = self._lanes.get(tp)
        if lane is None:
            lane = self._lanes[tp] = _Partition(self._producer_id, self._delivery_timeout_s)
        closed = lane.size_bytes + size_bytes > self._batch_bytes_max and bool(lane.records)
        if closed:
            self._close(tp, lane)
        lane.records.append(record)
        lane.size_bytes += size_bytes
        self._buffered_bytes += size_bytes
        if closed:
            self._pump(block=self._buffered_bytes > self._buffer_bytes_max)
        return closed

    def would_close(self, tp: TopicPartition, size_bytes: int) -> bool:
        """Whether a record of `size_bytes` for `tp` would close the partition's open batch."""
        lane = self._lanes.get(tp)
        return lane is not None and bool(lane.records) and lane.size_bytes + size_bytes > self._batch_bytes_max

    def finish(self) -> WriteCounts:
        """Send every record added and wait until each batch is acknowledged or recognised as written."""
        for tp, lane in self._lanes.items():
            if lane.records:
                self._close(tp, lane)
        while any(lane.in_flight or lane.queue for lane in self._lanes.values()):
            self._pump(block=True)
        return self.counts

    # ------------------------------------------------------------------ internals

    def _close(self, tp: TopicPartition, lane: _Partition) -> None:
        lane.queue.append(_Batch(tp, lane.records, lane.size_bytes, self._clock()))
        lane.records, lane.size_bytes = [], 0

    def _pump(self, block: bool) -> None:
        """Send what may go, then handle answers: all that arrived, waiting for one when `block` (until the
        buffer is back under its bound or nothing is in flight or waiting for a resend)."""
        self._dispatch_due()
        while True:
            try:
                timeout_s = self._wait_s() if block else 0
                batch, attempt, response, err = self._answers.get(block=block, timeout=timeout_s)
            except queue.Empty:
                self._dispatch_due()
                if not block or not self._waiting():
                    return
                continue
            self._on_answer(batch, attempt, response, err)
            self._dispatch_due()
            block = block and self._waiting() and self._buffered_bytes > self._buffer_bytes_max

    def _waiting(self) -> bool:
        return any(lane.in_flight or (lane.queue and lane.queue[0].attempts) for lane in self._lanes.values())

    def _wait_s(self) -> float:
        """Until the earliest resend falls due (at most 1 s: an answer wakes the wait earlier)."""
        now = self._clock()
        due = [lane.queue[0].retry_at_s for lane in self._lanes.values()
               if lane.queue and lane.queue[0].attempts and lane.may_send()]
        return max(min(due) - now, 0.001) if due else 1.0

    def _dispatch_due(self) -> None:
        now = self._clock()
        for lane in self._lanes.values():
            if lane.queue:
                for batch in lane.take(now, _at_once)[0]:
                    self._send(batch)

    def _send(self, batch: _Batch) -> None:
        if batch.encoded is None:
            batch.encoded = encode_stream_batch(batch.records)
        blob, count, max_ts = batch.encoded
        attempt = batch.attempts
        request = pb.ProduceRequest(request_id=next(self._request_ids), topic=batch.tp[0], partition=batch.tp[1],
                                    producer_id=batch.producer_id, base_sequence=batch.sequence,
                                    record_count=count, max_timestamp_ms=max_ts, records=blob)
        self._transport.send(request, lambda response, err: self._answers.put((batch, attempt, response, err)))

    def _on_answer(self, batch: _Batch, attempt: int, response, err: RaftbusError | None) -> None:
        """The lane decides; a batch it fails fails the task."""
        lane = self._lanes[batch.tp]
        if err is None:
            actions = lane.acked(batch, attempt, response)
        else:
            delay_s = self._transport.retry_delay_s(err, batch.attempts, batch.tp[0], batch.tp[1])
            actions = lane.refused(batch, attempt, err, self._clock(), delay_s)
        for action in actions:
            if action is RENEW:
                lane.renew(os.urandom(settings.PRODUCER_ID_BYTES))
            elif type(action) is Complete:
                self._written(action.batch, already=action.answer is None or action.answer.duplicate)
            elif action.timed_out:
                raise RequestTimedOut(f"{batch.tp[0]}/{batch.tp[1]}: batch at sequence {action.batch.sequence} not "
                                      f"acknowledged within deliveryTimeoutMs: {action.error.message}")
            else:
                raise action.error

    def _written(self, batch: _Batch, already: bool) -> None:
        self._buffered_bytes -= batch.size_bytes
        if already:
            self.counts.already_written += len(batch.records)
        else:
            self.counts.appended += len(batch.records)
        self.counts.batches += 1
