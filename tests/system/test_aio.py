"""System tests of raftbus.client.aio against real broker processes: produce and read, consumer groups that
rebalance and commit, queue leases settled by ack/nack/extend, typed errors, and a leader killed -9 under an
AsyncProducer."""
from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from raftbus.client import Admin, Producer, Queues, Reader, errors
from raftbus.client.aio import AsyncConsumer, AsyncProducer, AsyncQueueConsumer, AsyncReader
from tests.helpers import wait_until
from tests.system.conftest import running_cluster

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("aio")) as cluster:
        yield cluster.bootstrap


def create(bootstrap: str, topic: str, partitions: int, kind: str = "stream") -> None:
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions=partitions, replication_factor=3, kind=kind)


def read_all(bootstrap: str, topic: str) -> list:
    with Reader(bootstrap) as reader:
        return list(reader.iter_topic(topic, from_beginning=True, stop_at_end=True))


def test_produce_then_read(bootstrap):
    """Every acked record of send, enqueue and send_batch is read back by AsyncReader at the offset its metadata
    named, keyed records stay on one partition, and offsets are gapless per partition."""
    create(bootstrap, "aio-log", 3)

    async def produce():
        async with AsyncProducer(bootstrap, linger_ms=2) as producer:
            acked = [await producer.send("aio-log", f"one-{i}", key="same") for i in range(20)]
            futures = [await producer.enqueue("aio-log", f"many-{i}".encode()) for i in range(2_000)]
            acked += [await f for f in futures]
            first = await producer.send_batch("aio-log", 1, [b"bulk-0", (b"k", b"bulk-1")])
        return acked, first

    async def read(batch_offset: int):
        async with AsyncReader(bootstrap) as reader:
            tail = [r.value async for r in reader.iter_partition("aio-log", 1, batch_offset, stop_at_end=True)]
            return [r async for r in reader.iter_topic("aio-log", from_beginning=True, stop_at_end=True)], tail

    acked, first = asyncio.run(produce())
    records, tail = asyncio.run(read(first.offset))
    assert tail == [b"bulk-0", b"bulk-1"]
    by_place = {(r.topic, r.partition, r.offset): r.value for r in records}
    assert len(records) == 2_022
    assert len({m.partition for m in acked[:20]}) == 1
    for i, meta in enumerate(acked):
        expected = f"one-{i}" if i < 20 else f"many-{i - 20}"
        assert by_place[(meta.topic, meta.partition, meta.offset)] == expected.encode()
    assert by_place[("aio-log", 1, first.offset)] == b"bulk-0"
    assert by_place[("aio-log", 1, first.offset + 1)] == b"bulk-1"
    for partition in range(3):
        offsets = sorted(r.offset for r in records if r.partition == partition)
        assert offsets == list(range(len(offsets)))
    place = lambda r: (r.partition, r.offset)  # noqa: E731 - the order across partitions is each answer's arrival
    assert sorted(records, key=place) == sorted(read_all(bootstrap, "aio-log"), key=place)


def test_typed_errors(bootstrap):
    """Bad input and wrong topics raise the sync SDK's typed errors, and nothing is written."""
    create(bootstrap, "aio-errors", 2)
    create(bootstrap, "aio-errors-queue", 1, kind="queue")

    async def misuse() -> dict[str, type]:
        raised = {}
        calls = {
            "unknown topic": lambda p, r: p.send("aio-no-such-topic", b"x"),
            "unknown partition": lambda p, r: p.send("aio-errors", b"x", partition=7),
            "record too large": lambda p, r: p.send("aio-errors", b"x" * 2_000),
            "empty batch": lambda p, r: p.send_batch("aio-errors", 0, []),
            "bad value": lambda p, r: p.send("aio-errors", 12),
            "queue option on a stream": lambda p, r: p.send("aio-errors", b"x", priority=1),
            "send_batch to a queue": lambda p, r: p.send_batch("aio-errors-queue", 0, [b"x"]),
            "bad priority": lambda p, r: p.send("aio-errors-queue", b"x", priority="high"),
            "reader unknown topic": lambda p, r: r.partitions("aio-no-such-topic"),
            "offset beyond the end": lambda p, r: r.fetch("aio-errors", 0, 10),
            "reader unknown partition": lambda p, r: r.fetch("aio-errors", 9, 0),
        }
        async with AsyncProducer(bootstrap, batch_bytes_max=1_024) as producer, AsyncReader(bootstrap) as reader:
            for name, call in calls.items():
                with pytest.raises(errors.RaftbusError) as caught:
                    await call(producer, reader)
                raised[name] = type(caught.value)
        async with AsyncQueueConsumer(bootstrap, topics="aio-errors-queue") as queue_consumer:
            with pytest.raises(errors.RaftbusError) as caught:
                await AsyncQueueConsumer(bootstrap, topics="aio-errors").start()
            raised["queue consumer on a stream"] = type(caught.value)
            assert await queue_consumer.poll(0.2) == []
        return raised

    assert asyncio.run(misuse()) == {
        "unknown topic": errors.UnknownTopic, "unknown partition": errors.UnknownPartition,
        "record too large": errors.RecordTooLarge, "empty batch": errors.EmptyBatch,
        "bad value": errors.InvalidArgument, "queue option on a stream": errors.WrongTopicKind,
        "send_batch to a queue": errors.WrongTopicKind, "bad priority": errors.InvalidArgument,
        "reader unknown topic": errors.UnknownTopic, "offset beyond the end": errors.OffsetOutOfRange,
        "reader unknown partition": errors.UnknownPartition, "queue consumer on a stream": errors.WrongTopicKind,
    }
    assert read_all(bootstrap, "aio-errors") == []


def test_full_buffer_is_overloaded_and_close_delivers_what_was_accepted(bootstrap):
    """With linger long enough that nothing is sent, a record that does not fit the buffer waits max_block_ms and
    fails with Overloaded; close() still sends and acknowledges the record already accepted."""
    create(bootstrap, "aio-buffer", 1)

    async def fill():
        producer = AsyncProducer(bootstrap, linger_ms=60_000, batch_bytes_max=1_024, buffer_bytes_max=1_024,
                                 max_block_ms=50)
        accepted = await producer.enqueue("aio-buffer", b"a" * 600)
        with pytest.raises(errors.Overloaded):
            await producer.enqueue("aio-buffer", b"b" * 600)
        assert not accepted.done()
        await producer.close()
        return await accepted

    meta = asyncio.run(fill())
    assert meta.offset == 0 and [r.value for r in read_all(bootstrap, "aio-buffer")] == [b"a" * 600]


class Assignments:
    """What a listener saw."""

    def __init__(self):
        self.assigned, self.revoked = [], []

    def on_partitions_assigned(self, partitions):
        self.assigned.append(set(partitions))

    def on_partitions_revoked(self, partitions):
        self.revoked.append(set(partitions))


def test_group_of_two_rebalances_and_commits(bootstrap):
    """A second member takes half the partitions from the first (which commits and gives them up), both read
    every record between them exactly once, commits land at the end of each partition, and a commit for a partition the
    member no longer owns is refused with a typed error."""
    topic, group, total = "aio-group", "aio-billing", 4_000
    create(bootstrap, topic, 4)
    with Producer(bootstrap) as producer:
        for i in range(total):
            producer.send(topic, f"r-{i}", key=str(i))

    async def consume():
        seen: Counter = Counter()
        first_listener, second_listener = Assignments(), Assignments()
        first = AsyncConsumer(bootstrap, group=group, topics=topic, auto_offset_reset="earliest",
                              heartbeat_interval_ms=300, max_poll_records=100, listener=first_listener)
        second = AsyncConsumer(bootstrap, group=group, topics=topic, auto_offset_reset="earliest",
                               heartbeat_interval_ms=300, max_poll_records=100, listener=second_listener)
        async with first, second:
            while not first.assignment():
                seen.update(r.value for r in await first.poll(0.2))
            assert len(first.assignment()) == 4
            seen.update(r.value for r in await first.poll(0.2))

            async def until_split():
                while not (second.assignment() and len(first.assignment()) == 2):
                    for consumer in (first, second):
                        seen.update(r.value for r in await consumer.poll(0.05))
            await asyncio.wait_for(until_split(), 60)
            while sum(seen.values()) < total or len(seen) < total:
                for consumer in (first, second):
                    seen.update(r.value for r in await consumer.poll(0.05))
            for consumer in (first, second):
                await consumer.commit()
            taken = next(iter(second.assignment()))
            with pytest.raises((errors.PartitionNotAssigned, errors.StaleGeneration)):
                await first.commit({taken: 1})
            committed = {tp: await first.committed(tp) for tp in first.assignment() | second.assignment()}
        return seen, first, second, first_listener, second_listener, committed

    seen, first, second, first_listener, second_listener, committed = asyncio.run(consume())
    assert set(seen) == {f"r-{i}".encode() for i in range(total)}
    assert max(seen.values()) == 1  # revoked partitions were committed at their positions before the hand-over
    assert first.assignment() == set() and second.assignment() == set()  # both left on close
    assert first_listener.revoked[0] == second_listener.assigned[0]
    assert len(second_listener.assigned[0]) == 2
    with Reader(bootstrap) as reader:
        ends = {tp: reader.offsets(tp.topic, tp.partition)[1] for tp in committed}
    assert committed == ends and sum(ends.values()) == total


def test_consumer_seeks_and_commits_backwards_after_a_seek(bootstrap):
    """After reading to the end and committing, seek_to_beginning reads offset 0 again and the next commit moves
    the committed offset back (a seek is the one way to rewind it); seek_to_time past the last record and
    seek_to_end both land at the end."""
    topic, group = "aio-seek", "aio-seeker"
    create(bootstrap, topic, 1)
    with Producer(bootstrap) as producer:
        for i in range(50):
            producer.send(topic, f"s-{i}")
    tp = ("aio-seek", 0)

    async def seek():
        async with AsyncConsumer(bootstrap, group=group, topics=topic, auto_offset_reset="earliest",
                                 enable_auto_commit=False) as consumer:
            read = []
            async for record in consumer:
                read.append(record.offset)
                if len(read) == 50:
                    break
            await consumer.commit()
            at_end = await consumer.committed(tp)
            await consumer.seek_to_beginning()
            again = [r.offset for r in await consumer.poll(5.0, max_records=10)]
            await consumer.commit()
            rewound = await consumer.committed(tp)
            await consumer.seek_to_time(2**62)
            after_time = consumer.position(tp)
            await consumer.seek_to_end()
            return read, at_end, again, rewound, after_time, consumer.position(tp)

    read, at_end, again, rewound, after_time, after_end = asyncio.run(seek())
    assert read == list(range(50)) and at_end == 50
    assert again == list(range(10)) and rewound == 10
    assert after_time == after_end == 50


def test_queue_lease_ack_nack_extend(bootstrap):
    """AsyncProducer enqueues (an idempotency key sent twice names one message); leased messages are settled
    through asyncio futures: a nacked message comes back with its delivery count raised, extend returns the new
    deadline, acked messages are gone, and a second ack of one lease is refused."""
    topic = "aio-jobs"
    create(bootstrap, topic, 2, kind="queue")

    async def enqueue():
        async with AsyncProducer(bootstrap) as producer:
            sent = [await producer.send(topic, f"job-{i}", priority=i % 3) for i in range(29)]
            keyed = [await producer.send(topic, "keyed", idempotency_key="once") for _ in range(2)]
        return sent, keyed

    sent, keyed = asyncio.run(enqueue())
    assert [m.duplicate for m in keyed] == [False, True] and keyed[0].message_id == keyed[1].message_id
    ids = {m.message_id for m in sent + keyed}
    assert len(ids) == 30

    async def work():
        deliveries: Counter = Counter()
        async with AsyncQueueConsumer(bootstrap, topics=topic, visibility_ms=30_000) as consumer:
            nacked, acked, extended, last = set(), set(), None, None
            while len(acked) < 30:
                for message in await consumer.poll(0.5):
                    deliveries[message.message_id] += 1
                    if message.delivery_count == 1 and len(nacked) < 5:
                        nacked.add(message.message_id)
                        await message.nack(delay_ms=0, reason="try again")
                        continue
                    if extended is None:
                        extended = (message.lease_deadline_ms, await message.extend(60_000))
                    await message.ack()
                    acked.add(message.message_id)
                    last = message
            with pytest.raises((errors.LeaseLost, errors.UnknownMessage)):
                await last.ack()
            await consumer.flush(10)
        return deliveries, nacked, extended, acked

    deliveries, nacked, extended, acked = asyncio.run(work())
    assert acked == ids and set(deliveries) == ids
    assert {mid for mid, count in deliveries.items() if count == 2} == nacked and len(nacked) == 5
    assert extended[1] > extended[0]
    with Queues(bootstrap) as queues:
        stats = queues.stats(topic)
    assert (stats.ready, stats.delayed, stats.in_flight) == (0, 0, 0)


def test_producer_retries_through_a_leader_kill(tmp_path):
    """Killing -9 the partition leader while an AsyncProducer sends loses no acked record and duplicates none:
    retries follow the new leader and the idempotent sequence drops batches already appended."""
    topic = "aio-failover"
    with running_cluster(tmp_path) as cluster:
        create(cluster.bootstrap, topic, 1)

        def leader_id():
            with Admin(cluster.bootstrap) as admin:
                return admin.describe_topic(topic).partitions[0].leader_id

        async def produce():
            acked = []
            async with AsyncProducer(cluster.bootstrap, linger_ms=2) as producer:
                for round_ in range(40):
                    futures = [await producer.enqueue(topic, f"v-{round_}-{i}") for i in range(100)]
                    acked += [(await f, f"v-{round_}-{i}".encode()) for i, f in enumerate(futures)]
                    if round_ == 10:
                        victim = await asyncio.to_thread(leader_id)
                        cluster.broker(victim).kill()
            return acked, victim

        acked, victim = asyncio.run(produce())
        wait_until(lambda: leader_id() not in (0, None, victim), 30, what="a new leader")
        records = read_all(cluster.bootstrap, topic)
    assert len(acked) == 4_000
    values = [r.value for r in records]
    assert len(values) == len(set(values)) == 4_000
    assert [r.offset for r in records] == list(range(4_000))
    by_offset = {r.offset: r.value for r in records}
    assert all(by_offset[meta.offset] == value for meta, value in acked)
