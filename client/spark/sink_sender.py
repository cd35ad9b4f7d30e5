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

Other retriable errors (leader moves, timeouts) resend the same batch with the same sequence after the
router's backoff, until `delivery_timeout_ms`; anything else fails the task. The task's thread does all the
work; produce-stream callbacks only hand answers over through a queue.
"""
from __future__ import annotations

import queue
import time
from collections import deque
from dataclasses import dataclass, field

from raftbus.client.errors import OutOfOrderSequence, RaftbusError, RequestTimedOut
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


@dataclass(slots=True)
class _Batch:
    tp: TopicPartition
    sequence: int
    records: list
    size_bytes: int
    attempts: int = 0
    first_sent_s: float = 0.0
    retry_at_s: float = 0.0


@dataclass(slots=True)
class _PartitionLane:
    """One partition's batches: the one being filled, the closed ones in order, the one in flight."""

    next_sequence: int = 0
    records: list = field(default_factory=list)
    size_bytes: int = 0
    closed: deque = field(default_factory=deque)
    in_flight: _Batch | None = None


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
        self._lanes: dict[TopicPartition, _PartitionLane] = {}
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        self._buffered_bytes = 0
        self._request_ids = iter(range(1, 2**63))
        self.counts = WriteCounts()

    def add(self, tp: TopicPartition, record: tuple, size_bytes: int) -> bool:
        """Append one record (timestamp_ms, key, value, headers) to the partition's open batch; True when
        that batch closed before it (the record starts a new one)."""
        lane = self._lanes.get(tp)
        if lane is None:
            lane = self._lanes[tp] = _PartitionLane()
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
        while any(lane.in_flight or lane.closed for lane in self._lanes.values()):
            self._pump(block=True)
        return self.counts

    # ------------------------------------------------------------------ internals

    def _close(self, tp: TopicPartition, lane: _PartitionLane) -> None:
        lane.closed.append(_Batch(tp, lane.next_sequence, lane.records, lane.size_bytes))
        lane.next_sequence += len(lane.records)
        lane.records, lane.size_bytes = [], 0

    def _pump(self, block: bool) -> None:
        """Send what may go, then handle answers: all that arrived, waiting for one when `block` (until the
        buffer is back under its bound or nothing is in flight)."""
        self._dispatch_due()
        while True:
            try:
                timeout_s = self._wait_s() if block else 0
                batch, response, err = self._answers.get(block=block, timeout=timeout_s)
            except queue.Empty:
                self._dispatch_due()
                if not block or not self._waiting():
                    return
                continue
            self._on_answer(batch, response, err)
            self._dispatch_due()
            block = block and self._waiting() and self._buffered_bytes > self._buffer_bytes_max

    def _waiting(self) -> bool:
        return any(lane.in_flight for lane in self._lanes.values())

    def _wait_s(self) -> float:
        now = self._clock()
        due = [lane.in_flight.retry_at_s for lane in self._lanes.values()
               if lane.in_flight is not None and lane.in_flight.retry_at_s > now]
        return max(min(due) - now, 0.001) if due else 1.0

    def _dispatch_due(self) -> None:
        now = self._clock()
        for lane in self._lanes.values():
            if lane.in_flight is None and lane.closed:
                lane.in_flight = lane.closed.popleft()
                self._send(lane.in_flight, now)
            elif lane.in_flight is not None and lane.in_flight.retry_at_s and lane.in_flight.retry_at_s <= now:
                lane.in_flight.retry_at_s = 0.0
                self._send(lane.in_flight, now)

    def _send(self, batch: _Batch, now: float) -> None:
        blob, count, max_ts = encode_stream_batch(batch.records)
        if not batch.attempts:
            batch.first_sent_s = now
        batch.attempts += 1
        request = pb.ProduceRequest(request_id=next(self._request_ids), topic=batch.tp[0], partition=batch.tp[1],
                                    producer_id=self._producer_id, base_sequence=batch.sequence,
                                    record_count=count, max_timestamp_ms=max_ts, records=blob)
        self._transport.send(request, lambda response, err: self._answers.put((batch, response, err)))

    def _on_answer(self, batch: _Batch, response, err: RaftbusError | None) -> None:
        if err is None or isinstance(err, OutOfOrderSequence):
            self._written(batch, already=err is not None or response.duplicate)
            return
        delay_s = self._transport.retry_delay_s(err, batch.attempts, batch.tp[0], batch.tp[1])
        now = self._clock()
        if delay_s is None:
            raise err
        if now + delay_s > batch.first_sent_s + self._delivery_timeout_s:
            raise RequestTimedOut(f"{batch.tp[0]}/{batch.tp[1]}: batch at sequence {batch.sequence} not "
                                  f"acknowledged within deliveryTimeoutMs: {err.message}")
        batch.retry_at_s = now + max(delay_s, 0.001)

    def _written(self, batch: _Batch, already: bool) -> None:
        lane = self._lanes[batch.tp]
        lane.in_flight = None
        self._buffered_bytes -= batch.size_bytes
        if already:
            self.counts.already_written += len(batch.records)
        else:
            self.counts.appended += len(batch.records)
        self.counts.batches += 1
