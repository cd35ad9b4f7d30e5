"""Executor side: read one OffsetRange from the partition's leader and hand Spark its records.

Each fetch goes through the SDK router, which follows NOT_LEADER hints and retries unreachable leaders with
backoff; a leader killed mid-read costs a few retried fetches, not the task. What the router gives up on
(a retriable error after its own retries) is tried again up to SPARK_FETCH_ATTEMPTS_MAX times per position.

A position below the partition's log start means retention removed the records: failOnDataLoss decides
(raise, or warn and go on at the log start). A position above a new leader's high watermark (it is still
applying committed entries) is waited for, up to catchUpTimeoutMs, by long-polling fetches.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pyarrow as pa

from raftbus.client.errors import OffsetOutOfRange, RaftbusError
from raftbus.client.reader import Reader, end_offset
from raftbus.client.spark.connections import with_fresh_metadata
from raftbus.client.spark.columns import BatchPiece, arrow_schema, batch_pieces, to_record_batch, to_rows
from raftbus.client.spark.options import SPARK_FETCH_ATTEMPTS_MAX, SPARK_FETCH_WAIT_MS, SourceOptions
from raftbus.client.spark.planning import OffsetRange, report_data_loss
from raftbus.client.wire import raftbus_pb2 as pb

Fetch = Callable[[int], pb.FetchResponse]
LogStart = Callable[[], int]


def leader_fetch(reader: Reader, rng: OffsetRange) -> Fetch:
    """A raw fetch of rng's partition at an offset, from its leader, keeping the stored batches undecoded."""
    def fetch(offset: int) -> pb.FetchResponse:
        request = pb.FetchRequest(topic=rng.topic, partition=rng.partition, offset=offset,
                                  max_bytes=reader.fetch_bytes_max, max_wait_ms=SPARK_FETCH_WAIT_MS)
        timeout_s = reader.request_timeout_s + SPARK_FETCH_WAIT_MS / 1000
        return with_fresh_metadata(reader, lambda: reader.router.call_partition(
            rng.topic, rng.partition, lambda conn: conn.log.Fetch(request, timeout=timeout_s)))
    return fetch


class RangeCursor:
    """Walks one OffsetRange fetch by fetch; see the module docstring for the failure rules."""

    def __init__(self, rng: OffsetRange, options: SourceOptions, fetch: Fetch, log_start: LogStart,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.rng = rng
        self.options = options
        self.offset = rng.from_offset
        self._fetch = fetch
        self._log_start = log_start
        self._clock = clock
        self._sleep = sleep

    def pieces(self) -> Iterator[list[BatchPiece]]:
        """The records of the range in offset order, as the column pieces of one fetch at a time."""
        stalled_since = None
        while self.offset < self.rng.until_offset:
            response = self._fetch_here()
            if response is None:
                continue
            pieces = list(batch_pieces(response.batches, self.offset, self.rng.until_offset,
                                       self.options.include_headers))
            next_offset = min(end_offset(response.batches, self.offset), self.rng.until_offset)
            if next_offset > self.offset:
                stalled_since = None
                self.offset = next_offset
                if pieces:
                    yield pieces
                continue
            stalled_since = self._check_catch_up(stalled_since, response.high_watermark)

    def _fetch_here(self) -> pb.FetchResponse | None:
        """One fetch at the current offset; None when the offset moved (data loss skipped) instead."""
        for attempt in range(1, SPARK_FETCH_ATTEMPTS_MAX + 1):
            try:
                return self._fetch(self.offset)
            except OffsetOutOfRange:
                if not self._skip_lost_records():
                    return self._fetch_when_caught_up()
                return None
            except RaftbusError as err:
                if not err.retriable or attempt == SPARK_FETCH_ATTEMPTS_MAX:
                    raise
        raise AssertionError("unreachable")

    def _skip_lost_records(self) -> bool:
        """True when the offset was below the log start and failOnDataLoss=false moved it up (else raises)."""
        log_start = self._log_start()
        if self.offset >= log_start:
            return False
        lost_until = min(log_start, self.rng.until_offset)
        report_data_loss(self.options, f"{self.rng.topic}/{self.rng.partition}: records [{self.offset}, "
                                       f"{lost_until}) were removed by retention before they were read")
        self.offset = lost_until
        return True

    def _fetch_when_caught_up(self) -> pb.FetchResponse:
        """The offset is above the leader's high watermark: poll until it catches up, bounded."""
        deadline = self._clock() + self.options.catch_up_timeout_ms / 1000
        while True:
            try:
                return self._fetch(self.offset)
            except OffsetOutOfRange:
                if self._clock() >= deadline:
                    raise OffsetOutOfRange(
                        f"{self.rng.topic}/{self.rng.partition}: offset {self.offset} stayed above the leader's "
                        f"high watermark for {self.options.catch_up_timeout_ms} ms") from None
                self._sleep(SPARK_FETCH_WAIT_MS / 1000)

    def _check_catch_up(self, stalled_since: float | None, high_watermark: int) -> float:
        """An empty answer below the planned end: the leader's high watermark is behind; wait, bounded."""
        now = self._clock()
        if stalled_since is not None and now - stalled_since > self.options.catch_up_timeout_ms / 1000:
            raise OffsetOutOfRange(
                f"{self.rng.topic}/{self.rng.partition}: high watermark {high_watermark} did not reach the planned "
                f"end offset {self.rng.until_offset} within {self.options.catch_up_timeout_ms} ms")
        return now if stalled_since is None else stalled_since


def read_range(rng: OffsetRange, options: SourceOptions, reader: Reader) -> Iterator[pa.RecordBatch | tuple]:
    """What the source's read() yields for one range: Arrow record batches, or tuples with useArrow=false."""
    cursor = RangeCursor(rng, options, leader_fetch(reader, rng),
                         lambda: with_fresh_metadata(reader, lambda: reader.offsets(rng.topic, rng.partition))[0])
    if not options.use_arrow:
        for pieces in cursor.pieces():
            yield from to_rows(rng.topic, rng.partition, pieces, options.include_headers)
        return
    schema = arrow_schema(options.include_headers)
    for pieces in cursor.pieces():
        yield to_record_batch(rng.topic, rng.partition, pieces, schema)
