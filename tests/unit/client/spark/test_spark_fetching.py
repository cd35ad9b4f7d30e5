"""Goal: an executor reads exactly its planned offset range, retries leader trouble a bounded number of
times, and handles records removed by retention as failOnDataLoss says."""
import dataclasses

import pytest

from raftbus.client.errors import InvalidArgument, OffsetOutOfRange, Unavailable
from raftbus.client.records import encode_batch, encode_stored_batch
from raftbus.client.spark.fetching import RangeCursor
from raftbus.client.spark.options import SPARK_FETCH_ATTEMPTS_MAX, parse_options
from raftbus.client.spark.planning import OffsetRange
from raftbus.client.wire import raftbus_pb2 as pb

OPTIONS = parse_options({"bootstrap": "127.0.0.1:1", "subscribe": "t", "catchUpTimeoutMs": "1000"}, streaming=True)


class FakeLog:
    """A partition of stored batches of 4 records each; fetch answers one batch at a time, like a small max_bytes."""

    def __init__(self, batches: int, log_start: int = 0):
        self.log_start = log_start
        self.high_watermark = 4 * batches
        self.failures: list[Exception] = []
        self.calls = 0

    def fetch(self, offset: int) -> pb.FetchResponse:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        if not self.log_start <= offset <= self.high_watermark:
            raise OffsetOutOfRange(f"offset {offset} outside [{self.log_start}, {self.high_watermark}]")
        base = offset - offset % 4
        if base >= self.high_watermark:
            return pb.FetchResponse(high_watermark=self.high_watermark, log_start_offset=self.log_start)
        count = min(4, self.high_watermark - base)
        blob, count, max_ts = encode_batch([(base + i, None, str(base + i).encode(), ()) for i in range(count)])
        return pb.FetchResponse(batches=encode_stored_batch(base, count, 0, max_ts, blob),
                                high_watermark=self.high_watermark, log_start_offset=self.log_start)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def read(log: FakeLog, start: int, until: int, options=OPTIONS, clock=None) -> list[int]:
    clock = clock or FakeClock()
    cursor = RangeCursor(OffsetRange("t", 0, start, until), options, log.fetch, lambda: log.log_start,
                         clock=clock, sleep=clock.sleep)
    return [offset for pieces in cursor.pieces() for piece in pieces
            for offset in range(piece.first_offset, piece.first_offset + len(piece))]


def test_reads_exactly_the_planned_range_across_fetches():
    log = FakeLog(batches=10)
    assert read(log, 3, 29) == list(range(3, 29))
    assert log.calls == 8  # one per stored batch from the one holding offset 3


def test_lost_records_fail_the_read_when_fail_on_data_loss():
    log = FakeLog(batches=10, log_start=12)
    with pytest.raises(OffsetOutOfRange, match="failOnDataLoss=true"):
        read(log, 3, 29)


def test_lost_records_are_skipped_without_fail_on_data_loss():
    log = FakeLog(batches=10, log_start=12)
    lenient = dataclasses.replace(OPTIONS, fail_on_data_loss=False)
    assert read(log, 3, 29, lenient) == list(range(12, 29))
    assert read(log, 3, 9, lenient) == []


def test_leader_trouble_is_retried_a_bounded_number_of_times():
    log = FakeLog(batches=2)
    log.failures = [Unavailable("leader killed")] * (SPARK_FETCH_ATTEMPTS_MAX - 1)
    assert read(log, 0, 8) == list(range(8))
    log.failures = [Unavailable("leader killed")] * SPARK_FETCH_ATTEMPTS_MAX
    with pytest.raises(Unavailable):
        read(log, 0, 8)


def test_errors_that_are_not_retriable_fail_at_once():
    log = FakeLog(batches=2)
    log.failures = [InvalidArgument("bad request")]
    with pytest.raises(InvalidArgument):
        read(log, 0, 8)
    assert log.calls == 1


def test_a_new_leader_behind_the_planned_end_is_waited_for_then_given_up_on():
    log = FakeLog(batches=2)
    log.failures = [OffsetOutOfRange("above the high watermark")] * 3
    assert read(log, 4, 8) == list(range(4, 8))
    behind = FakeLog(batches=2)
    behind.high_watermark = 6  # the planned end 8 never arrives
    with pytest.raises(OffsetOutOfRange, match="did not reach the planned end offset 8"):
        read(behind, 0, 8, clock=AdvancingClock())


class AdvancingClock(FakeClock):
    """Each reading moves time on by 0.3 s, as fetches that long-poll would."""

    def __call__(self) -> float:
        self.now += 0.3
        return self.now
