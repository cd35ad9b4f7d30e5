"""The Consumer's fetcher: one long-poll Fetch in flight per owned partition, answers buffered undecoded.

Fetches are non-blocking gRPC calls; their answers are handed over to the consumer's thread, cut into chunks
(one stored batch each, from the first offset wanted to the end of the batch) and kept as views of the
received bytes. `drain` hands chunks out without decoding a record: a `ConsumerRecords` decodes its records
only when iterated, so the per-record cost is paid by whoever reads records, not by the fetch path.

Every partition has an epoch; a seek or a re-assignment bumps it, and an answer of an older epoch is dropped.
Thread model: gRPC callbacks only append to `_arrived` under the shared condition; everything else runs on
the consumer's thread.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import grpc

from raftbus.client.errors import RaftbusError, Unavailable, error_from_rpc
from raftbus.client.groups.calls import TopicPartition
from raftbus.client.records import (
    STORED_BATCH_OVERHEAD_BYTES,
    Record,
    decode_stored_batch,
    iter_stored_batch,
    iter_stored_batches,
)
from raftbus.client.router import Router
from raftbus.client.wire import raftbus_pb2 as pb

Member = tuple[str, str, int]  # (group, member_id, generation)


@dataclass(frozen=True, slots=True)
class Chunk:
    """Offsets [first, end) of one stored batch of one partition; `stored` is that batch's undecoded bytes."""

    tp: TopicPartition
    stored: memoryview
    first: int
    end: int

    def records(self) -> list[Record]:
        """The chunk's records, decoded in one pass (a list: one generator less per record on the hot path)."""
        decoded = []
        for batch in iter_stored_batches(self.stored):
            decoded += decode_stored_batch(self.tp.topic, self.tp.partition, batch, self.first)
        if decoded and decoded[-1].offset >= self.end:
            decoded = [r for r in decoded if r.offset < self.end]
        return decoded

    def iter_records(self) -> Iterator[Record]:
        """The chunk's records as records() gives them, made as they are taken where the batch allows it
        (records.iter_stored_batch)."""
        topic, partition = self.tp.topic, self.tp.partition
        return itertools.chain.from_iterable(iter_stored_batch(topic, partition, batch, self.first, self.end)
                                             for batch in iter_stored_batches(self.stored))


class ConsumerRecords:
    """The records of one poll, in offset order per partition; decoded only when iterated.

    `len()` and `offsets()` read batch headers only, so a caller that needs counts or offset ranges (a bulk
    consumer, a benchmark) never pays for decoding records.
    """

    __slots__ = ("_chunks", "_count")

    def __init__(self, chunks: list[Chunk] | None = None):
        self._chunks = chunks or []
        self._count = sum(c.end - c.first for c in self._chunks)

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[Record]:
        return itertools.chain.from_iterable(map(Chunk.iter_records, self._chunks))  # chunk by chunk, as taken

    def partitions(self) -> set[TopicPartition]:
        return {c.tp for c in self._chunks}

    def records(self, tp: TopicPartition) -> list[Record]:
        return [r for c in self._chunks if c.tp == tp for r in c.records()]

    def offsets(self) -> dict[TopicPartition, tuple[int, int]]:
        """{partition: (first offset, offset after the last)} of the records in this poll."""
        ranges: dict[TopicPartition, tuple[int, int]] = {}
        for c in self._chunks:
            first, end = ranges.get(c.tp, (c.first, c.end))
            ranges[c.tp] = (min(first, c.first), max(end, c.end))
        return ranges


@dataclass(slots=True)
class _Partition:
    position: int          # the next offset handed to the user
    fetch_offset: int      # the next offset to request (the end of what is buffered)
    epoch: int
    chunks: deque = field(default_factory=deque)
    buffered_bytes: int = 0
    call: object = None    # the Fetch in flight
    retry_at_s: float = 0.0
    failures: int = 0


class Fetcher:
    def __init__(self, router: Router, wake: threading.Condition, *, fetch_bytes_max: int, fetch_wait_ms: int,
                 buffer_bytes_max: int, clock: Callable[[], float] = time.monotonic):
        self.router = router
        self.wake = wake
        self.fetch_bytes_max = fetch_bytes_max
        self.fetch_wait_ms = fetch_wait_ms
        self.buffer_bytes_max = buffer_bytes_max
        self._clock = clock
        self._parts: dict[TopicPartition, _Partition] = {}
        self._epochs = itertools.count(1)
        self._arrived: deque = deque()  # (tp, epoch, requested offset, response, error); appended under `wake`
        self._rotation = 0

    # ------------------------------------------------------------------ positions
    def assign(self, tp: TopicPartition, position: int) -> None:
        self.remove([tp])
        self._parts[tp] = _Partition(position, position, next(self._epochs))

    def remove(self, tps) -> None:
        for tp in tps:
            part = self._parts.pop(tp, None)
            if part is not None and part.call is not None:
                part.call.cancel()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        part = self._parts[tp]
        if part.call is not None:
            part.call.cancel()
        self._parts[tp] = _Partition(offset, offset, next(self._epochs))

    def position(self, tp: TopicPartition) -> int:
        return self._parts[tp].position

    def positions(self) -> dict[TopicPartition, int]:
        return {tp: part.position for tp, part in self._parts.items()}

    def retry_later(self, tp: TopicPartition, delay_s: float) -> None:
        part = self._parts.get(tp)
        if part is not None:
            part.retry_at_s = self._clock() + delay_s

    def failures(self, tp: TopicPartition) -> int:
        part = self._parts.get(tp)
        return part.failures if part is not None else 0

    # ------------------------------------------------------------------ fetching
    def send(self, member: Member) -> None:
        """Start a Fetch for every owned partition that has none in flight, is due, and has buffer room."""
        now_s = self._clock()
        total = sum(p.buffered_bytes for p in self._parts.values())
        for tp, part in self._parts.items():
            if part.call is not None or part.retry_at_s > now_s or part.buffered_bytes >= self.fetch_bytes_max:
                continue
            if total >= self.buffer_bytes_max:
                return
            self._start(tp, part, member)

    def _start(self, tp: TopicPartition, part: _Partition, member: Member) -> None:
        group, member_id, generation = member
        request = pb.FetchRequest(topic=tp.topic, partition=tp.partition, offset=part.fetch_offset,
                                  max_bytes=self.fetch_bytes_max, max_wait_ms=self.fetch_wait_ms, group=group,
                                  member_id=member_id, generation=generation)
        epoch, offset = part.epoch, part.fetch_offset
        try:
            conn = self.router.connection(self.router.leader_address(tp.topic, tp.partition))
            part.call = conn.log.Fetch.future(request, timeout=self.router.request_timeout_s + self.fetch_wait_ms / 1000)
        except RaftbusError as err:
            part.call = _DONE
            self._arrive(tp, epoch, offset, None, err)
            return
        part.call.add_done_callback(lambda call: self._on_done(tp, epoch, offset, call))

    def _on_done(self, tp: TopicPartition, epoch: int, offset: int, call) -> None:
        if call.cancelled():
            return
        try:
            self._arrive(tp, epoch, offset, call.result(), None)
        except grpc.RpcError as exc:
            self._arrive(tp, epoch, offset, None, error_from_rpc(exc))
        except Exception as exc:  # a cancelled or broken call: report it, the consumer retries
            self._arrive(tp, epoch, offset, None, Unavailable(f"fetch ended: {exc!r}"))

    def _arrive(self, tp, epoch, offset, response, error) -> None:
        with self.wake:
            self._arrived.append((tp, epoch, offset, response, error))
            self.wake.notify_all()

    def has_arrivals(self) -> bool:
        return bool(self._arrived)

    def collect(self) -> list[tuple[TopicPartition, RaftbusError]]:
        """Buffer every answer that arrived; returns the fetch errors of owned partitions for the consumer."""
        with self.wake:
            arrived, self._arrived = self._arrived, deque()
        errors = []
        for tp, epoch, offset, response, error in arrived:
            part = self._parts.get(tp)
            if part is None or part.epoch != epoch:
                continue
            part.call = None
            if error is not None:
                part.failures += 1
                errors.append((tp, error))
            else:
                part.failures = 0
                self._buffer(tp, part, offset, response.batches)
        return errors

    def _buffer(self, tp: TopicPartition, part: _Partition, offset: int, batches: bytes) -> None:
        view = memoryview(batches)
        position = 0
        for batch in iter_stored_batches(view):
            size = STORED_BATCH_OVERHEAD_BYTES + len(batch.blob)
            end = batch.base_offset + batch.record_count
            first = max(batch.base_offset, offset)
            if end > first:
                part.chunks.append(Chunk(tp, view[position:position + size], first, end))
                part.buffered_bytes += size
                part.fetch_offset = max(part.fetch_offset, end)
            position += size

    # ------------------------------------------------------------------ handing out
    def drain(self, max_records: int) -> ConsumerRecords:
        """Up to max_records buffered records, taking batches from the partitions in turn; moves positions."""
        taken: list[Chunk] = []
        budget = max_records
        parts = [(tp, p) for tp, p in self._parts.items() if p.chunks]
        if not parts:
            return ConsumerRecords()
        self._rotation = (self._rotation + 1) % len(parts)
        parts = parts[self._rotation:] + parts[:self._rotation]
        while budget > 0 and parts:
            still = []
            for tp, part in parts:
                if budget <= 0:
                    break
                chunk = part.chunks[0]
                count = chunk.end - chunk.first
                if count > budget:
                    taken.append(Chunk(tp, chunk.stored, chunk.first, chunk.first + budget))
                    part.chunks[0] = Chunk(tp, chunk.stored, chunk.first + budget, chunk.end)
                    part.position = chunk.first + budget
                    budget = 0
                    break
                part.chunks.popleft()
                part.buffered_bytes -= len(chunk.stored)
                part.position = chunk.end
                taken.append(chunk)
                budget -= count
                if part.chunks:
                    still.append((tp, part))
            parts = still
        return ConsumerRecords(taken)

    def buffered(self) -> bool:
        return any(p.chunks for p in self._parts.values())

    def close(self) -> None:
        self.remove(list(self._parts))


class _Done:
    """Marks a fetch that failed before it was sent (its error is already queued)."""

    def cancel(self) -> None:
        pass


_DONE = _Done()
