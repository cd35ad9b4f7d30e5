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
    """Stands in for Router: runs each RPC body against in-memory partitions and records the requests. Partition p
    is led by "leader-{p % leaders}"; FetchMany answers as the broker does (broker/log/service.py), at once."""

    def __init__(self, partitions: dict[tuple[str, int], FakePartition], leaders: int = 2):
        self.partitions = partitions
        self.leaders = leaders
        self.fetches: list[pb.FetchRequest] = []
        self.many: list[tuple[str, pb.FetchManyRequest]] = []  # (address, request) of each FetchMany answered
        self.routed: list[tuple[str, int]] = []
        self.failures: list[tuple[str, int | None]] = []  # (error code, partition) of each note_failure
        self.after_fetch = None  # called after each fetch, to change the log between fetches
        self.refuse = None  # (address, request, partition) -> an error to answer that partition with, or None
        self.conn = SimpleNamespace(log=SimpleNamespace(Fetch=self._fetch, ListOffsets=self._list_offsets,
                                                        FetchMany=None))

    def call_partition(self, topic, partition, fn):
        self.routed.append((topic, partition))
        return fn(self.conn)

    def leader_address(self, topic, partition):
        return f"leader-{partition % self.leaders}"

    def call_at(self, address, fn):
        conn = SimpleNamespace(log=SimpleNamespace(
            FetchMany=self.conn.log.FetchMany or (lambda request, timeout=None: self._fetch_many(address, request))))
        return fn(conn)

    def note_failure(self, err, attempt, *, topic=None, partition=None):
        self.failures.append((err.code, partition))
        return 0.0 if attempt <= 3 and err.code in ("NOT_LEADER", "UNAVAILABLE") else None

    def _fetch_many(self, address, request):
        answers, total = [], 0
        for wanted in request.partitions:
            log = self.partitions[(request.topic, wanted.partition)]
            refused = self.refuse(address, request, wanted.partition) if self.refuse else None
            if refused is not None:
                answers.append(pb.FetchResponse(topic=request.topic, partition=wanted.partition,
                                                error=pb.Error(code=refused.code, message=refused.message)))
                continue
            offset = {-2: log.log_start_offset, -1: log.high_watermark}.get(wanted.offset, wanted.offset)
            batches = b""
            try:
                if total < request.max_bytes:
                    batches = log.read(offset, min(wanted.max_bytes, request.max_bytes - total))
            except OffsetOutOfRange as exc:
                answers.append(pb.FetchResponse(topic=request.topic, partition=wanted.partition,
                                                high_watermark=log.high_watermark,
                                                log_start_offset=log.log_start_offset,
                                                error=pb.Error(code=exc.code, message=exc.message)))
                continue
            total += len(batches)
            answers.append(pb.FetchResponse(topic=request.topic, partition=wanted.partition, batches=batches,
                                            high_watermark=log.high_watermark, log_start_offset=log.log_start_offset))
        self.many.append((address, request))
        if self.after_fetch:
            self.after_fetch()
        return pb.FetchManyResponse(partitions=answers)

    def many_positions(self) -> list[tuple[int, int]]:
        """(partition, offset) of every partition named by a FetchMany answered, in order."""
        return [(p.partition, p.offset) for _, request in self.many for p in request.partitions]

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


def reader_for(partitions, leaders: int = 2, **options) -> tuple[Reader, FakeRouter, Sleeps]:
    router = FakeRouter(partitions, leaders)
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


def test_iter_topic_reads_several_partitions_with_one_fetch_many_per_leader_in_order(log):
    """Goal: iter_topic reads several partitions with FetchMany calls, each naming only partitions of one leader,
    starting at the log start the broker resolves (no ListOffsets); every partition's records arrive once, in
    order, up to the high watermark of its first answer."""
    logs = {("t", 0): log, **{("t", p): FakePartition() for p in (1, 2, 3)}}
    for p in (1, 2, 3):
        logs[("t", p)].append([f"x{p}-{i}".encode() for i in range(2)])
        logs[("t", p)].append([f"y{p}".encode()])
    reader, router, _ = reader_for(logs, fetch_bytes_max=1)  # one batch per partition and call
    records = list(reader.iter_topic("t", from_beginning=True, stop_at_end=True))
    assert [r.offset for r in records if r.partition == 0] == list(range(9))
    for p in (1, 2, 3):
        assert [r.value for r in records if r.partition == p] == [f"x{p}-0".encode(), f"x{p}-1".encode(),
                                                                  f"y{p}".encode()]
    assert router.routed == []  # no ListOffsets and no single-partition Fetch
    for address, request in router.many:
        assert {f"leader-{p.partition % 2}" for p in request.partitions} == {address}
    assert sorted(p for p, o in router.many_positions() if o == -2) == [0, 1, 2, 3]  # each started once at -2
    reader.close()


def test_iter_topic_from_the_end_waits_for_new_records(log):
    """Without from_beginning, iter_topic returns only records produced after it started."""
    other = FakePartition()
    reader, router, sleeps = reader_for({("t", 0): log, ("t", 1): other})
    # appended once partition 1's start was resolved (its leader's call answered)
    router.after_fetch = lambda: other.append([b"new"]) if other.high_watermark == 0 and any(
        p.partition == 1 for p in router.many[-1][1].partitions) else None
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


def test_iter_topic_sends_a_leaders_next_call_before_handing_over_its_records():
    """Goal: once a leader's FetchMany answer is in, its next call leaves before the records are handed over (the
    caller has taken one record); each partition's records arrive once and in order and no (partition, offset) is
    fetched twice."""
    reader, router, _ = reader_for(many_partitions(12), fetch_bytes_max=1, leaders=1)
    records = reader.iter_topic("t", from_beginning=True, stop_at_end=True)
    first = next(records)
    assert wait_until(lambda: len(router.many) >= 2), "no call was sent ahead"  # one record of three taken
    rest = [first] + list(records)
    for number in range(12):
        assert [r.value for r in rest if r.partition == number] == [
            f"p{number}-{b}-{i}".encode() for b in range(2) for i in range(3)]
    reader.close()


def test_iter_topic_answers_past_the_byte_cap_rotate_so_no_partition_waits_behind_the_others(monkeypatch):
    """Goal: a leader's answer is capped (READER_FETCHES_AHEAD_MAX × fetch_bytes_max shared by the calls); the
    partitions each call names rotate, so every partition is read although each answer holds only some."""
    from raftbus.client import settings

    monkeypatch.setattr(settings, "READER_FETCHES_AHEAD_MAX", 1)
    logs = many_partitions(4, batches=3)
    size = len(logs[("t", 0)].batches[0][2])
    reader, router, _ = reader_for(logs, fetch_bytes_max=size, leaders=1)  # one batch per answer
    records = list(reader.iter_topic("t", from_beginning=True, stop_at_end=True))
    assert len(records) == 4 * 9
    firsts = [request.partitions[0].partition for _, request in router.many]
    assert set(firsts[:4]) == {0, 1, 2, 3}  # each of the first four calls led with another partition
    reader.close()


def test_iter_topic_fetches_a_refused_partition_again_while_the_others_are_read():
    """Goal: a partition refused NOT_LEADER in a FetchMany answer is fetched again after the router's delay (its
    note_failure), while the partitions answered in the same call are read on; a whole call that fails (here
    UNAVAILABLE) is made again for all its partitions. Nothing is lost or repeated."""
    from raftbus.client.errors import NotLeader

    reader, router, _ = reader_for(many_partitions(4), leaders=2)
    refused = []

    def refuse(address, request, partition):
        if partition == 2 and not refused:
            refused.append(partition)
            return NotLeader("elections")
        return None

    router.refuse = refuse
    failed = []

    def failing_once(request, timeout=None):
        if not failed:
            failed.append(request)
            raise Unavailable("the leader went away")
        return router._fetch_many("leader-x", request)

    records = list(reader.iter_topic("t", from_beginning=True, stop_at_end=True))
    assert refused == [2] and ("NOT_LEADER", 2) in router.failures
    for number in range(4):
        assert [r.offset for r in records if r.partition == number] == list(range(6))
    router.conn.log.FetchMany = failing_once
    records = list(reader.iter_topic("t", from_beginning=True, stop_at_end=True))
    assert failed and ("UNAVAILABLE", failed[0].partitions[0].partition) in router.failures
    for number in range(4):
        assert [r.offset for r in records if r.partition == number] == list(range(6))
    reader.close()


def test_iter_topic_reads_only_the_partitions_asked_for():
    """Goal: `partitions` limits the read to those partitions, in the order given; a repeat, a number the topic
    does not have or a non-integer is InvalidArgument before anything is read."""
    reader, router, _ = reader_for(many_partitions(5, batches=1))
    records = list(reader.iter_topic("t", from_beginning=True, stop_at_end=True, partitions=[4, 1]))
    assert sorted((r.partition, r.offset) for r in records) == [(1, 0), (1, 1), (1, 2), (4, 0), (4, 1), (4, 2)]
    assert {p for p, _ in router.many_positions()} == {1, 4}
    for wrong in ([1, 1], [5], [-1], ["1"]):
        with pytest.raises(InvalidArgument):
            list(reader.iter_topic("t", from_beginning=True, partitions=wrong))
    reader.close()


def test_iter_topic_restarts_a_partition_trimmed_under_its_read():
    """Goal: retention removes records below a partition's position between two of its calls; the broker answers
    OFFSET_OUT_OF_RANGE with the new log start, and the earliest-read rule moves the read there at once (no
    ListOffsets): it goes on from the new log start, the other partitions untouched."""
    logs = many_partitions(3, batches=3)
    size = len(logs[("t", 0)].batches[0][2])
    reader, router, _ = reader_for(logs, fetch_bytes_max=size, leaders=1)  # one batch per partition and call
    router.after_fetch = lambda: logs[("t", 2)].trim_to(6) if len(router.many) == 1 else None
    records = list(reader.iter_topic("t", from_beginning=True, stop_at_end=True))
    assert [r.offset for r in records if r.partition == 2] == [0, 1, 2, 6, 7, 8]  # its first batch, the new start
    assert [r.offset for r in records if r.partition == 0] == list(range(9))
    assert router.routed == []
    reader.close()


def test_fetch_many_asks_each_leader_once_within_its_partition_bound(monkeypatch):
    """Goal: Reader.fetch_many sends one FetchMany per leader, splitting a leader's partitions over calls of at most
    READER_FETCH_MANY_PARTITIONS_MAX, and answers every partition: its records from the resolved start, or its
    refusal."""
    from raftbus.client import settings
    from raftbus.client.errors import NotLeader
    from raftbus.client.reader import EARLIEST_TIMESTAMP_MS, PartitionRefusal

    monkeypatch.setattr(settings, "READER_FETCH_MANY_PARTITIONS_MAX", 2)
    reader, router, _ = reader_for(many_partitions(7, batches=1), leaders=2)
    router.refuse = lambda address, request, partition: NotLeader("moved") if partition == 6 else None
    answers = reader.fetch_many("t", [(p, EARLIEST_TIMESTAMP_MS) for p in range(7)])
    assert sorted(answers) == list(range(7))
    for p in range(6):
        assert [r.value for r in answers[p].records] == [f"p{p}-0-{i}".encode() for i in range(3)]
        assert answers[p].next_offset == 3
    assert isinstance(answers[6], PartitionRefusal) and answers[6].error.code == "NOT_LEADER"
    calls = sorted((address, sorted(p.partition for p in request.partitions)) for address, request in router.many)
    assert calls == [("leader-0", [0, 2]), ("leader-0", [4, 6]), ("leader-1", [1, 3]), ("leader-1", [5])]
    reader.close()
