"""Goal: the AsyncReader sends each partition's next fetch ahead, as an asyncio task, before it hands over the
records of the last one; every record still arrives once and in order, a fetch sent ahead that fails is made
again by the iterating coroutine (where OffsetOutOfRange is handled as for any fetch), and no task outlives the
read, driven by a fake AsyncRouter over in-memory partition logs."""
import asyncio
import gc
from collections import Counter
from types import SimpleNamespace

import pytest

from raftbus.client.aio import AsyncReader
from raftbus.client.errors import OffsetOutOfRange, Unavailable
from raftbus.client.wire import raftbus_pb2 as pb
from tests.unit.client.test_reader import FakePartition, FakeRouter

FETCH_WAIT_MS = 500


class FakeAsyncRouter:
    """Stands in for AsyncRouter: runs each RPC body against in-memory partitions, giving the event loop one turn
    per fetch (the answer travelling), and records every fetch with the task that sent it."""

    request_timeout_s = 1.0

    def __init__(self, partitions: dict[tuple[str, int], FakePartition], leaders: int = 2):
        self.partitions = partitions
        self.sync = FakeRouter(partitions, leaders)  # FetchMany's answers, leaders and note_failure, as the broker's
        self.calls_in_flight = self.calls_in_flight_max = self.calls_started = 0
        self.calls_held: asyncio.Event | None = None  # FetchMany calls after the first wait for it
        self.calls_cancelled = 0
        self.fetches: list[pb.FetchRequest] = []
        self.senders: list[asyncio.Task] = []  # the task that sent each fetch
        self.in_flight = self.in_flight_max = 0
        self.held: dict[int, asyncio.Event] = {}  # offset → an answer that waits for the event
        self.cancelled: list[int] = []  # offsets of the fetches cancelled before they answered
        self.after_fetch = None  # called after each answer, to change the log between fetches
        self.closed = False
        self.conn = SimpleNamespace(log=SimpleNamespace(Fetch=self._fetch, ListOffsets=self._list_offsets))

    async def leader_address(self, topic, partition):
        return self.sync.leader_address(topic, partition)

    def note_failure(self, err, attempt, *, topic=None, partition=None):
        return self.sync.note_failure(err, attempt, topic=topic, partition=partition)

    async def call_at(self, address, fn):
        if self.closed:
            raise Unavailable("router is closed")

        async def fetch_many(request, timeout=None):
            self.calls_started += 1
            self.calls_in_flight += 1
            self.calls_in_flight_max = max(self.calls_in_flight_max, self.calls_in_flight)
            try:
                await asyncio.sleep(0)
                if self.calls_held is not None and self.sync.many:
                    await self.calls_held.wait()
                return self.sync._fetch_many(address, request)
            except asyncio.CancelledError:
                self.calls_cancelled += 1
                raise
            finally:
                self.calls_in_flight -= 1

        return await fn(SimpleNamespace(log=SimpleNamespace(FetchMany=fetch_many)))

    async def call_partition(self, topic, partition, fn):
        if self.closed:
            raise Unavailable("router is closed")
        return await fn(self.conn)

    async def partitions_for(self, topic):
        return len([key for key in self.partitions if key[0] == topic])

    async def close(self):
        self.closed = True

    def fetched_offsets(self, partition: int = 0) -> list[int]:
        return [f.offset for f in self.fetches if f.partition == partition]

    async def _fetch(self, request, timeout=None):
        self.fetches.append(request)
        self.senders.append(asyncio.current_task())
        self.in_flight += 1
        self.in_flight_max = max(self.in_flight_max, self.in_flight)
        try:
            await asyncio.sleep(0)
            if request.offset in self.held:
                await self.held[request.offset].wait()
            log = self.partitions[(request.topic, request.partition)]
            batches = log.read(request.offset, request.max_bytes)
        except asyncio.CancelledError:
            self.cancelled.append(request.offset)
            raise
        finally:
            self.in_flight -= 1
        response = pb.FetchResponse(topic=request.topic, partition=request.partition, batches=batches,
                                    high_watermark=log.high_watermark, log_start_offset=log.log_start_offset)
        if self.after_fetch:
            self.after_fetch()
        return response

    async def _list_offsets(self, request, timeout=None):
        log = self.partitions[(request.topic, request.partition)]
        offset = log.log_start_offset if request.timestamp_ms == -2 else log.high_watermark
        return pb.ListOffsetsResponse(offset=offset, log_start_offset=log.log_start_offset,
                                      high_watermark=log.high_watermark)


def reader_for(partitions, leaders: int = 2, **options) -> tuple[AsyncReader, FakeAsyncRouter]:
    reader = AsyncReader("127.0.0.1:1", fetch_bytes_max=1, fetch_wait_ms=FETCH_WAIT_MS, **options)
    reader.router = FakeAsyncRouter(partitions, leaders)  # one fetch per stored batch (fetch_bytes_max=1)
    return reader, reader.router


def run(main):
    """asyncio.run(main), failing on anything the loop reports (a task destroyed while pending, an exception never
    retrieved) during the run or when its leftovers are collected."""
    reports = []

    async def watched():
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: reports.append(context["message"]))
        return await main

    result = asyncio.run(watched())
    gc.collect()
    assert reports == []
    return result


def other_tasks() -> set[asyncio.Task]:
    return asyncio.all_tasks() - {asyncio.current_task()}


async def turns_until(predicate, what: str, turns: int = 100) -> None:
    """Let the event loop run until `predicate()` holds, failing after `turns` turns with what was awaited."""
    for _ in range(turns):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"after {turns} turns of the event loop: not {what}")


async def offsets_of(records) -> list[int]:
    return [r.offset async for r in records]


@pytest.fixture
def log():
    partition = FakePartition()  # stored batches at 0 (3 records), 3 (5 records) and 8 (1 record)
    partition.append([b"a0", b"a1", b"a2"])
    partition.append([b"b3", b"b4", b"b5", b"b6", b"b7"])
    partition.append([b"c8"])
    return partition


def test_records_across_several_fetches_come_in_order_and_each_offset_is_fetched_once(log):
    """Three fetches' records arrive in offset order, and the fetches sent ahead are used: no offset is fetched
    twice."""
    reader, router = reader_for({("t", 0): log})
    offsets = run(offsets_of(reader.iter_partition("t", 0, offset="earliest", stop_at_end=True)))
    assert offsets == list(range(9))
    assert Counter(router.fetched_offsets()) == {0: 1, 3: 1, 8: 1}


def test_the_next_fetch_is_sent_before_the_first_record_of_the_last_answer_is_handed_over(log):
    """When the caller gets the first record of the fetch at 0, the fetch at 3 is already a task of its own
    (with the long-poll wait of a one-partition read), and it reaches the broker while the caller holds the
    record, before the caller asks for another."""

    async def main():
        records = reader.iter_partition("t", 0, offset="earliest", stop_at_end=True)
        first = await anext(records)
        assert first.offset == 0
        assert len(other_tasks()) == 1, "no fetch was sent ahead"
        for _ in range(3):
            await asyncio.sleep(0)  # the caller at work; the iterator stays suspended
        assert router.fetched_offsets() == [0, 3]
        assert router.senders[1] is not asyncio.current_task()
        assert router.fetches[1].max_wait_ms == FETCH_WAIT_MS
        return [first.offset] + await offsets_of(records)

    reader, router = reader_for({("t", 0): log})
    assert run(main()) == list(range(9))


def test_a_fetch_sent_ahead_that_fails_is_made_again_by_the_reader_and_its_answer_used(log):
    """The fetch sent ahead at 3 fails with UNAVAILABLE in its task; the iterating coroutine fetches 3 again and
    the read goes on with nothing lost or repeated."""
    failed_in = []

    async def main():
        call_partition = router.call_partition

        async def failing_once(topic, partition, fn):
            if router.fetched_offsets() == [0] and not failed_in:
                failed_in.append(asyncio.current_task())
                raise Unavailable("the leader went away")
            return await call_partition(topic, partition, fn)

        router.call_partition = failing_once
        offsets = await offsets_of(reader.iter_partition("t", 0, offset="earliest", stop_at_end=True))
        return offsets, asyncio.current_task()

    reader, router = reader_for({("t", 0): log})
    offsets, caller = run(main())
    assert offsets == list(range(9))
    assert failed_in and failed_in[0] is not caller
    assert router.fetched_offsets() == [0, 3, 8]  # the fake records only the fetches that reached it
    assert router.senders[1] is caller


@pytest.mark.parametrize("start, read, raises", [
    ("earliest", [0, 1, 2, 8], None),  # restarts at the new log start, skipping what retention removed
    (1, [1, 2], OffsetOutOfRange),  # an explicit position is never skipped over
])
def test_out_of_range_on_a_fetch_sent_ahead_follows_the_log_start_rule(log, start, read, raises):
    """Retention removes offsets 0..7 once the first fetch has answered, so the fetch sent ahead at 3 gets
    OffsetOutOfRange; the read then does what any fetch's OffsetOutOfRange does: an earliest read restarts at
    the log start, a read from an explicit offset raises."""
    caller = []

    async def main():
        caller.append(asyncio.current_task())
        got = []
        try:
            async for record in reader.iter_partition("t", 0, offset=start, stop_at_end=True):
                got.append(record.offset)
        except OffsetOutOfRange as err:
            return got, err
        return got, None

    reader, router = reader_for({("t", 0): log})
    router.after_fetch = lambda: log.trim_to(8)
    got, err = run(main())
    assert got == read
    assert (type(err) if err else None) is raises
    assert router.fetched_offsets()[:3] == [start if start != "earliest" else 0, 3, 3]
    assert router.senders[1] is not caller[0] and router.senders[2] is caller[0]


def read_from_earliest(reader: AsyncReader, kind: str):
    """One partition read to its end by iter_partition, or as the only partition of iter_topic."""
    if kind == "iter_partition":
        return reader.iter_partition("t", 0, offset="earliest", stop_at_end=True)
    return reader.iter_topic("t", from_beginning=True, stop_at_end=True)


@pytest.mark.parametrize("kind", ["iter_partition", "iter_topic"])
@pytest.mark.parametrize("leave", ["aclose", "break"])
def test_leaving_a_read_early_leaves_no_fetch_running(log, leave, kind):
    """The caller stops after the first record while the fetch sent ahead at 3 is still waiting for its answer:
    aclose() cancels it before it returns, a `break` (the loop closing the iterator) soon after, and nothing is
    reported about a task destroyed while pending or an exception never retrieved."""

    async def main():
        records = read_from_earliest(reader, kind)
        if leave == "aclose":
            assert (await anext(records)).offset == 0
            await asyncio.sleep(0)
            assert router.fetched_offsets() == [0, 3]
            await records.aclose()
        else:
            async for record in records:
                assert record.offset == 0
                await asyncio.sleep(0)
                break
            del records  # the loop closes the abandoned iterator in a task of its own
            await turns_until(lambda: not other_tasks(), "every task ended")
        return other_tasks()

    reader, router = reader_for({("t", 0): log})
    router.held[3] = asyncio.Event()
    assert run(main()) == set()
    assert router.cancelled == [3]


def test_cancelling_a_reading_task_while_it_waits_for_a_fetch_sent_ahead_cancels_that_fetch(log):
    """The task reading the partition is cancelled while it waits for the answer of the fetch sent ahead at 3;
    that fetch is cancelled with it, so no task is left behind."""

    async def main():
        got = []

        async def read():
            async for record in reader.iter_partition("t", 0, offset="earliest", stop_at_end=True):
                got.append(record.offset)

        reading = asyncio.get_running_loop().create_task(read())
        await turns_until(lambda: got == [0, 1, 2] and router.fetched_offsets() == [0, 3], "records 0-2 read")
        await asyncio.sleep(0)  # the reader now waits for the answer at 3
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        return got, other_tasks()

    reader, router = reader_for({("t", 0): log})
    router.held[3] = asyncio.Event()
    assert run(main()) == ([0, 1, 2], set())
    assert router.cancelled == [3]


def test_closing_the_reader_mid_read_ends_the_read_with_the_routers_error(log):
    """The reader is closed while the fetch sent ahead at 3 waits for its answer: close() cancels it, the read
    hands over the records it already holds, then fetches 3 again and ends with the closed router's
    Unavailable, not with the cancellation."""

    async def main():
        records = reader.iter_partition("t", 0, offset="earliest", stop_at_end=True)
        assert (await anext(records)).offset == 0
        await asyncio.sleep(0)
        await reader.close()
        assert other_tasks() == set() and router.cancelled == [3]
        assert [(await anext(records)).offset for _ in range(2)] == [1, 2]
        with pytest.raises(Unavailable, match="router is closed"):
            await asyncio.wait_for(anext(records), 5)
        return other_tasks()

    reader, router = reader_for({("t", 0): log})
    router.held[3] = asyncio.Event()
    assert run(main()) == set()


def test_iter_topic_over_three_partitions_keeps_each_partitions_order(log):
    """Three partitions on two leaders read with FetchMany calls, both leaders' calls in flight at once, each naming
    only its leader's partitions and starting at the log start the broker resolves (no ListOffsets, no Fetch):
    each partition's records come in offset order, every one once."""
    second, third = FakePartition(), FakePartition()
    for size in (2, 1, 4):
        second.append([b"x"] * size)
    for size in (1, 1, 1, 3):
        third.append([b"y"] * size)
    reader, router = reader_for({("t", 0): log, ("t", 1): second, ("t", 2): third})

    async def main():
        return [(r.partition, r.offset) async for r in reader.iter_topic("t", from_beginning=True, stop_at_end=True)]

    records = run(main())
    for partition, end in ((0, 9), (1, 7), (2, 6)):
        assert [o for p, o in records if p == partition] == list(range(end))
    assert router.fetches == [] and router.calls_in_flight_max == 2
    for address, request in router.sync.many:
        assert {f"leader-{p.partition % 2}" for p in request.partitions} == {address}
    assert sorted(p for p, o in router.sync.many_positions() if o == -2) == [0, 1, 2]


def test_iter_topic_keeps_one_call_in_flight_per_leader():
    """Twelve partitions on three leaders: at most one FetchMany per leader is in flight, and the next one starts
    before the records of the last answer are handed over; each partition's records still come in order."""
    logs = {}
    for number in range(12):
        partition = FakePartition()
        for size in (2, 3):
            partition.append([b"z"] * size)
        logs[("t", number)] = partition
    reader, router = reader_for(logs, leaders=3)

    async def main():
        records = reader.iter_topic("t", from_beginning=True, stop_at_end=True)
        first = await anext(records)
        await asyncio.sleep(0)  # a call created before the record was handed over starts now
        started = router.calls_started
        return [(first.partition, first.offset)] + [(r.partition, r.offset) async for r in records], started

    records, started = run(main())
    for number in range(12):
        assert [o for p, o in records if p == number] == list(range(5))
    assert router.calls_in_flight_max == 3
    assert started > 3  # the first leader's next call started before its first record was handed over


@pytest.mark.parametrize("leave", ["aclose", "close the reader"])
def test_leaving_a_read_of_several_partitions_leaves_no_call_running(log, leave):
    """The caller takes one record of a two-partition read while the next calls wait for their answers: aclose()
    cancels and awaits them; closing the reader cancels them too, and the read then ends with the closed router's
    Unavailable. No task is left behind and nothing is reported about one."""
    other = FakePartition()
    other.append([b"x"] * 2)
    other.append([b"x"] * 2)
    reader, router = reader_for({("t", 0): log, ("t", 1): other}, leaders=1)

    async def main():
        records = reader.iter_topic("t", from_beginning=True, stop_at_end=True)
        assert (await anext(records)).offset == 0
        await turns_until(lambda: router.calls_in_flight == 1, "the next call in flight")
        if leave == "aclose":
            await records.aclose()
        else:
            await reader.close()
            with pytest.raises(Unavailable, match="router is closed"):
                while True:
                    await asyncio.wait_for(anext(records), 5)
        return other_tasks()

    router.calls_held = asyncio.Event()
    assert run(main()) == set()
    assert router.calls_cancelled == 1


def test_iter_topic_reads_only_the_partitions_asked_for(log):
    """`partitions` limits the read to those partitions; a repeat or a number the topic does not have is
    InvalidArgument."""
    from raftbus.client.errors import InvalidArgument

    other = FakePartition()
    other.append([b"x"] * 2)
    reader, router = reader_for({("t", 0): log, ("t", 1): other, ("t", 2): FakePartition()})

    async def main():
        read = [(r.partition, r.offset) async for r in reader.iter_topic("t", from_beginning=True, stop_at_end=True,
                                                                         partitions=[1, 0])]
        for wrong in ([1, 1], [3]):
            with pytest.raises(InvalidArgument):
                [r async for r in reader.iter_topic("t", from_beginning=True, partitions=wrong)]
        return read

    records = run(main())
    assert [o for p, o in records if p == 1] == [0, 1]
    assert [o for p, o in records if p == 0] == list(range(9))
    assert {p for p, _ in router.sync.many_positions()} == {0, 1}
