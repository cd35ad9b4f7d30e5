"""Goal: the Reader decodes fetched stored batches into records at or above the requested offset, computes the
next offset correctly (mid-batch starts, empty answers), and its iterators keep order, stop where asked and
recover from retention, driven by a fake router over an in-memory partition log."""
import threading
import time
from types import SimpleNamespace

import pytest

from raftbus.client.errors import CorruptBatch, InvalidArgument, OffsetOutOfRange, Unavailable
from raftbus.client.reader import Reader
from raftbus.client.records import encode_batch, encode_stored_batch
from raftbus.client.wire import raftbus_pb2 as pb

APPEND_TIME_MS = 1_700_000_000_000


def stored(base_offset: int, values: list[bytes], keys=None, headers=None, timestamp_ms=1000) -> bytes:
    keys = keys or [None] * len(values)
    headers = headers or [()] * len(values)
    tuples = [(timestamp_ms + i, k, v, h) for i, (k, v, h) in enumerate(zip(keys, values, headers))]
    blob, count, max_ts = encode_batch(tuples)
    return encode_stored_batch(base_offset, count, APPEND_TIME_MS, max_ts, blob)


class FakePartition:
    """A partition's committed log as stored batches, with a log start that retention can move."""

    def __init__(self):
        self.batches: list[tuple[int, int, bytes]] = []  # (base_offset, record_count, stored bytes)
        self.log_start_offset = 0

    @property
    def high_watermark(self) -> int:
        return self.batches[-1][0] + self.batches[-1][1] if self.batches else self.log_start_offset

    def append(self, values: list[bytes], **kwargs) -> None:
        self.batches.append((self.high_watermark, len(values), stored(self.high_watermark, values, **kwargs)))

    def trim_to(self, offset: int) -> None:
        self.batches = [b for b in self.batches if b[0] + b[1] > offset]
        self.log_start_offset = self.batches[0][0] if self.batches else offset

    def read(self, offset: int, max_bytes: int) -> bytes:
        if not self.log_start_offset <= offset <= self.high_watermark:
            raise OffsetOutOfRange(f"offset {offset} outside [{self.log_start_offset}, {self.high_watermark}]")
        chosen, size = [], 0
        for base, count, data in self.batches:
            if base + count <= offset:
                continue
            if chosen and size + len(data) > max_bytes:
                break
            chosen.append(data)
            size += len(data)
        return b"".join(chosen)


class FakeRouter:
    """Stands in for Router: runs each RPC body against in-memory partitions and records the requests."""

    def __init__(self, partitions: dict[tuple[str, int], FakePartition]):
        self.partitions = partitions
        self.fetches: list[pb.FetchRequest] = []
        self.routed: list[tuple[str, int]] = []
        self.after_fetch = None  # called after each fetch, to change the log between fetches
        self.conn = SimpleNamespace(log=SimpleNamespace(Fetch=self._fetch, ListOffsets=self._list_offsets))

    def call_partition(self, topic, partition, fn):
        self.routed.append((topic, partition))
        return fn(self.conn)

    def partitions_for(self, topic):
        return len([key for key in self.partitions if key[0] == topic])

    def close(self):
        pass

    def _fetch(self, request, timeout=None):
        self.fetches.append(request)
        log = self.partitions[(request.topic, request.partition)]
        batches = log.read(request.offset, request.max_bytes)
        response = pb.FetchResponse(topic=request.topic, partition=request.partition, batches=batches,
                                    high_watermark=log.high_watermark, log_start_offset=log.log_start_offset)
        if self.after_fetch:
            self.after_fetch()
        return response

    def _list_offsets(self, request, timeout=None):
        log = self.partitions[(request.topic, request.partition)]
        offset = log.log_start_offset if request.timestamp_ms == -2 else log.high_watermark
        return pb.ListOffsetsResponse(offset=offset, log_start_offset=log.log_start_offset,
                                      high_watermark=log.high_watermark)


class Sleeps:
    def __init__(self):
        self.calls: list[float] = []

    def __call__(self, seconds):
        self.calls.append(seconds)


def reader_for(partitions, **options) -> tuple[Reader, FakeRouter, Sleeps]:
    router = FakeRouter(partitions)
    sleeps = Sleeps()
    return Reader(router=router, sleep=sleeps, **options), router, sleeps


def values(records) -> list[bytes]:
    return [r.value for r in records]


@pytest.fixture
def log():
    partition = FakePartition()
    partition.append([b"a0", b"a1", b"a2"], keys=[b"k0", None, b"k2"], headers=[(("h", b"1"),), (), ()])
    partition.append([b"b3", b"b4", b"b5", b"b6", b"b7"])
    partition.append([b"c8"])
    return partition


def test_fetch_decodes_every_record_of_every_batch(log):
    """A fetch at a batch start returns all records with offsets, keys, headers and timestamps, and the next
    offset is the end of the last batch."""
    reader, router, _ = reader_for({("t", 0): log})
    result = reader.fetch("t", 0, 0)
    assert [r.offset for r in result.records] == list(range(9))
    assert values(result.records)[:4] == [b"a0", b"a1", b"a2", b"b3"]
    first = result.records[0]
    assert (first.topic, first.partition, first.key, first.headers, first.timestamp_ms) == (
        "t", 0, b"k0", (("h", b"1"),), 1000)
    assert result.records[1].key is None
    assert (result.next_offset, result.high_watermark, result.log_start_offset) == (9, 9, 0)
    assert router.routed == [("t", 0)]


def test_fetch_starting_mid_batch_skips_earlier_records(log):
    """A fetch at offset 5 gets the batch starting at 3 but returns records 5.. only."""
    reader, _, _ = reader_for({("t", 0): log}, fetch_bytes_max=1)
    result = reader.fetch("t", 0, 5)
    assert [r.offset for r in result.records] == [5, 6, 7]
    assert values(result.records) == [b"b5", b"b6", b"b7"]
    assert result.next_offset == 8


def test_fetch_at_the_high_watermark_is_empty(log):
    """An empty answer yields no records and leaves the next offset where it was."""
    reader, _, _ = reader_for({("t", 0): log})
    result = reader.fetch("t", 0, 9)
    assert result.records == []
    assert (result.next_offset, result.high_watermark) == (9, 9)


def test_fetch_of_an_empty_partition(log):
    """A partition with no records answers empty at offset 0."""
    reader, _, _ = reader_for({("t", 0): FakePartition()})
    result = reader.fetch("t", 0, 0)
    assert (result.records, result.next_offset, result.high_watermark) == ([], 0, 0)


def test_fetch_request_carries_the_limits(log):
    """max_bytes defaults to fetch_bytes_max, and both limits reach the request."""
    reader, router, _ = reader_for({("t", 0): log}, fetch_bytes_max=4096)
    reader.fetch("t", 0, 2)
    reader.fetch("t", 0, 2, max_bytes=100, max_wait_ms=250)
    first, second = router.fetches
    assert (first.topic, first.partition, first.offset, first.max_bytes, first.max_wait_ms) == ("t", 0, 2, 4096, 0)
    assert (second.max_bytes, second.max_wait_ms) == (100, 250)


def test_fetch_of_a_truncated_answer_raises_corrupt_batch(log):
    """A stored batch cut short is reported as CorruptBatch, not silently dropped."""
    reader, router, _ = reader_for({("t", 0): log})
    router.conn.log.Fetch = lambda request, timeout=None: pb.FetchResponse(
        batches=stored(0, [b"x", b"y"])[:-3], high_watermark=2)
    with pytest.raises(CorruptBatch):
        reader.fetch("t", 0, 0)


def test_iter_partition_stops_at_the_high_watermark_seen_at_start(log):
    """With stop_at_end, records appended after the read started are not returned."""
    reader, router, _ = reader_for({("t", 0): log}, fetch_bytes_max=1)
    router.after_fetch = lambda: log.append([b"late"]) if log.high_watermark < 12 else None
    records = list(reader.iter_partition("t", 0, offset=1, stop_at_end=True))
    assert [r.offset for r in records] == list(range(1, 9))
    assert log.high_watermark > 9


def test_iter_partition_from_latest_with_stop_at_end_is_empty(log):
    """Reading from the end up to the end returns nothing and does not fetch."""
    reader, router, _ = reader_for({("t", 0): log})
    assert list(reader.iter_partition("t", 0, offset="latest", stop_at_end=True)) == []
    assert router.fetches == []


def test_earliest_read_restarts_at_the_log_start_after_retention(log):
    """An earliest-style read whose position was removed by retention goes on from the new log start."""
    reader, router, sleeps = reader_for({("t", 0): log}, fetch_bytes_max=1)
    router.after_fetch = lambda: log.trim_to(8)
    records = list(reader.iter_partition("t", 0, offset="earliest", stop_at_end=True))
    assert [r.offset for r in records] == [0, 1, 2, 8]
    assert sleeps.calls == []


def test_read_at_an_explicit_offset_below_the_log_start_raises(log):
    """A read that asked for a specific offset gets OffsetOutOfRange instead of skipping records."""
    log.trim_to(3)
    reader, _, _ = reader_for({("t", 0): log})
    with pytest.raises(OffsetOutOfRange):
        list(reader.iter_partition("t", 0, offset=1, stop_at_end=True))


def test_iter_topic_reads_partitions_round_robin_in_order(log):
    """iter_topic alternates between partitions one fetch at a time and keeps each partition's order."""
    other = FakePartition()
    other.append([b"x0", b"x1"])
    other.append([b"x2"])
    reader, _, _ = reader_for({("t", 0): log, ("t", 1): other}, fetch_bytes_max=1)
    records = list(reader.iter_topic("t", from_beginning=True, stop_at_end=True))
    assert [(r.partition, r.offset) for r in records] == [
        (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (0, 3), (0, 4), (0, 5), (0, 6), (0, 7), (1, 2), (0, 8)]


def test_iter_topic_from_the_end_waits_for_new_records(log):
    """Without from_beginning, iter_topic returns only records produced after it started."""
    other = FakePartition()
    reader, router, sleeps = reader_for({("t", 0): log, ("t", 1): other})
    router.after_fetch = lambda: other.append([b"new"]) if other.high_watermark == 0 else None
    first = next(reader.iter_topic("t"))
    assert (first.partition, first.offset, first.value) == (1, 0, b"new")


def test_idle_timeout_ends_a_read_without_records(log):
    """iter_partition with idle_timeout_ms ends once that long passes without a record."""
    now = [0.0]

    def long_poll_clock():
        now[0] += 0.2
        return now[0]

    reader, _, _ = reader_for({("t", 0): log}, clock=long_poll_clock)
    records = list(reader.iter_partition("t", 0, offset=7, idle_timeout_ms=1_000))
    assert [r.offset for r in records] == [7, 8]


def test_offsets_and_bad_positions(log):
    """offsets() answers (log start, high watermark); a negative or unknown position is InvalidArgument."""
    log.trim_to(3)
    reader, _, _ = reader_for({("t", 0): log})
    assert reader.offsets("t", 0) == (3, 9)
    with pytest.raises(InvalidArgument):
        list(reader.iter_partition("t", 0, offset="middle"))
    with pytest.raises(InvalidArgument):
        list(reader.iter_partition("t", 0, offset=-1))


def wait_until(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_iter_partition_sends_the_next_fetch_while_the_caller_holds_the_records(log):
    """Goal: once a fetch's records are handed over, the fetch after them is already on its way (the caller has
    taken one record); every record arrives once and in order, and no offset is fetched twice."""
    reader, router, _ = reader_for({("t", 0): log}, fetch_bytes_max=1)
    records = reader.iter_partition("t", 0, offset="earliest", stop_at_end=True)
    first = next(records)
    assert first.offset == 0
    assert wait_until(lambda: len(router.fetches) == 2), "no fetch was sent ahead"
    assert router.fetches[1].offset == 3
    assert [first.offset] + [r.offset for r in records] == list(range(9))
    assert [f.offset for f in router.fetches] == [0, 3, 8]
    reader.close()


def test_a_fetch_sent_ahead_that_fails_is_sent_again_by_the_caller(log):
    """Goal: the fetch sent ahead fails (here UNAVAILABLE, on the Reader's pool thread); the caller's thread sends
    it again and the read goes on with nothing lost or repeated."""
    reader, router, _ = reader_for({("t", 0): log}, fetch_bytes_max=1)
    caller = threading.get_ident()
    failed_on = []
    fetch = router.conn.log.Fetch

    def failing_once(request, timeout=None):
        if request.offset == 3 and not failed_on:
            failed_on.append(threading.get_ident())
            raise Unavailable("the leader went away")
        return fetch(request, timeout)

    router.conn.log.Fetch = failing_once
    records = list(reader.iter_partition("t", 0, offset="earliest", stop_at_end=True))
    assert [r.offset for r in records] == list(range(9))
    assert failed_on and failed_on[0] != caller
    assert [f.offset for f in router.fetches] == [0, 3, 8]  # the fake records only the fetches that answered
    reader.close()


def test_closing_the_reader_during_a_read_ends_it_with_the_routers_error(log, monkeypatch):
    """Goal: a Reader closed while an iterator's fetch sent ahead is still queued on its pool ends that read with
    the error any fetch on a closed Reader gets (here the router's Unavailable), not with the pool's
    cancellation. One pool thread, kept busy, so the fetch sent ahead waits in the queue when the Reader closes."""
    from raftbus.client import settings

    monkeypatch.setattr(settings, "READER_FETCHES_AHEAD_MAX", 1)
    reader, router, _ = reader_for({("t", 0): log}, fetch_bytes_max=1)
    closed = threading.Event()

    def call_partition(topic, partition, fn):
        if closed.is_set():
            raise Unavailable("router is closed")
        return fn(router.conn)

    router.call_partition = call_partition
    records = reader.iter_partition("t", 0, offset="earliest", stop_at_end=True)
    assert [next(records).offset for _ in range(3)] == [0, 1, 2]
    assert wait_until(lambda: len(router.fetches) == 2)  # the fetch at 3 was sent ahead and answered
    release = threading.Event()
    busy = reader._ahead.submit(release.wait, 10)
    assert wait_until(busy.running)
    assert next(records).offset == 3  # takes the answer at 3 and sends the fetch at 8 ahead: queued behind `busy`
    closed.set()
    reader.close()
    release.set()
    busy.result(10)
    assert [r.offset for r in (next(records) for _ in range(4))] == [4, 5, 6, 7]
    with pytest.raises(Unavailable):
        next(records)


def many_partitions(count: int, batches: int = 2) -> dict[tuple[str, int], FakePartition]:
    logs = {}
    for number in range(count):
        partition = FakePartition()
        for b in range(batches):
            partition.append([f"p{number}-{b}-{i}".encode() for i in range(3)])
        logs[("t", number)] = partition
    return logs


def test_iter_topic_sends_the_next_partitions_fetches_ahead_up_to_its_pool(monkeypatch):
    """Goal: once a partition's records are handed over, the fetches of the partitions after it are already on
    their way, at most READER_FETCHES_AHEAD_MAX of them; each partition's records arrive once and in order and
    no (partition, offset) is fetched twice."""
    from raftbus.client import settings

    monkeypatch.setattr(settings, "READER_FETCHES_AHEAD_MAX", 3)
    reader, router, _ = reader_for(many_partitions(12))
    records = reader.iter_topic("t", from_beginning=True, stop_at_end=True)
    first = next(records)
    assert (first.partition, first.offset) == (0, 0)
    assert wait_until(lambda: len(router.fetches) == 4), "the next partitions' fetches were not sent ahead"
    time.sleep(0.1)
    assert sorted(f.partition for f in router.fetches) == [0, 1, 2, 3]  # no more than the pool's threads
    rest = [first] + list(records)
    for number in range(12):
        assert [r.value for r in rest if r.partition == number] == [
            f"p{number}-{b}-{i}".encode() for b in range(2) for i in range(3)]
    assert sorted((f.partition, f.offset) for f in router.fetches) == [(p, 0) for p in range(12)]
    reader.close()


def test_iter_topic_reads_only_the_partitions_asked_for():
    """Goal: `partitions` limits the read to those partitions, in the order given; a repeat, a number the topic
    does not have or a non-integer is InvalidArgument before anything is read."""
    reader, router, _ = reader_for(many_partitions(5, batches=1))
    records = list(reader.iter_topic("t", from_beginning=True, stop_at_end=True, partitions=[4, 1]))
    assert [(r.partition, r.offset) for r in records] == [(4, 0), (4, 1), (4, 2), (1, 0), (1, 1), (1, 2)]
    assert {f.partition for f in router.fetches} == {1, 4}
    for wrong in ([1, 1], [5], [-1], ["1"]):
        with pytest.raises(InvalidArgument):
            list(reader.iter_topic("t", from_beginning=True, partitions=wrong))
    reader.close()


def test_iter_topic_restarts_a_partition_trimmed_under_its_fetch_sent_ahead():
    """Goal: retention removes records below a partition's position while its fetch is being sent ahead; that fetch
    fails (OffsetOutOfRange on the pool's thread) and the caller's fetch applies the earliest-read rule: the read
    goes on from the new log start."""
    logs = many_partitions(3)
    reader, router, _ = reader_for(logs, fetch_bytes_max=1)
    trimmed = []
    fetch = router.conn.log.Fetch

    def trimming_once(request, timeout=None):
        if request.partition == 2 and not trimmed:
            logs[("t", 2)].trim_to(3)
            trimmed.append(threading.get_ident())
        return fetch(request, timeout)

    router.conn.log.Fetch = trimming_once
    records = list(reader.iter_topic("t", from_beginning=True, stop_at_end=True))
    assert trimmed and trimmed[0] != threading.get_ident()
    assert [r.offset for r in records if r.partition == 2] == [3, 4, 5]
    assert [r.offset for r in records if r.partition == 0] == list(range(6))
    reader.close()
