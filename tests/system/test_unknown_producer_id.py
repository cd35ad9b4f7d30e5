"""System tests: every stream produce path goes on when a partition forgets its producer id.

Real broker processes with `producer_idle_ms` = 0: the retention pass that trims a partition (here past its
`retention_bytes`) also drops the state of every producer not seen in that very millisecond, so the producer's
next batch, whose sequence is not 0, is answered UNKNOWN_PRODUCER_ID by the broker itself. The producer must
start the partition over under a fresh producer id: every batch succeeds, in order, none twice.
"""
from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from raftbus.client import Admin, Producer, Reader
from raftbus.client.aio import AsyncProducer
from raftbus.client.errors import UnknownProducerId, error_from_rpc
from raftbus.client.produce_stream import StreamProduceTransport
from raftbus.client.records import encode_batch, record_size
from raftbus.client.router import Router
from raftbus.client.spark.sink_identity import producer_id as derived_producer_id
from raftbus.client.spark.sink_sender import SequencedSender
from raftbus.client.wire import raftbus_pb2 as pb
from tests.helpers import wait_until
from tests.system.conftest import running_cluster

pytestmark = pytest.mark.system

RETENTION_BYTES = 8_000
OLD = [b"old-%03d-" % i + bytes(92) for i in range(100)]  # one batch of ~11 KB: trimmed whole
NEW_BATCHES = [[b"new-%d-%d" % (batch, i) for i in range(3)] for batch in range(3)]
SINGLES = [b"single-%d" % i for i in range(10)]


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    env = {"RAFTBUS_PRODUCER_IDLE_MS": "0", "RAFTBUS_RETENTION_CHECK_INTERVAL_MS": "100"}
    with running_cluster(tmp_path_factory.mktemp("unknown-producer"), env=env) as cluster:
        yield cluster.bootstrap


def create(bootstrap: str, topic: str) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions=1, replication_factor=3, retention_bytes=RETENTION_BYTES)


def forget(bootstrap: str, topic: str, producer_id: bytes, next_sequence: int) -> int:
    """Wait until retention trimmed the partition's first batch, then check that the partition answers
    UNKNOWN_PRODUCER_ID to this producer's next sequence; returns the new log start offset."""
    with Reader(bootstrap) as reader:
        start = wait_until(lambda: reader.offsets(topic, 0)[0], 30, what=f"{topic} trimmed")
    blob, count, max_ts = encode_batch([(1, None, b"probe", ())])
    request = pb.ProduceRequest(request_id=1, topic=topic, partition=0, producer_id=producer_id,
                                base_sequence=next_sequence, record_count=count, max_timestamp_ms=max_ts, records=blob)
    with Router(bootstrap) as router:
        with pytest.raises(grpc.RpcError) as refused:
            router.connection(router.leader_address(topic, 0)).log.Produce(request, timeout=10)
    assert type(error_from_rpc(refused.value)) is UnknownProducerId
    return start


def stored(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    with Reader(bootstrap) as reader:
        return [(r.offset, r.value) for r in reader.iter_partition(topic, 0, "earliest", stop_at_end=True)]


def expected_after(start: int) -> list[tuple[int, bytes]]:
    values = [v for batch in NEW_BATCHES for v in batch] + SINGLES
    return list(enumerate(values, start=start))


def test_the_sync_producer_starts_over_under_a_fresh_id(bootstrap):
    """Producer's batches (three at once, then single records) sent after the partition forgot its id land once
    each, in send order, right after the trimmed batch."""
    topic = "forgotten-sync"
    create(bootstrap, topic)
    with Producer(bootstrap, linger_ms=0, max_in_flight_per_partition=3, delivery_timeout_ms=20_000) as producer:
        assert producer.send_batch(topic, 0, OLD).result(30).offset == 0
        start = forget(bootstrap, topic, producer.producer_id, len(OLD))
        futures = [producer.send_batch(topic, 0, batch) for batch in NEW_BATCHES]
        singles = [producer.send(topic, value, partition=0) for value in SINGLES]
        producer.flush(30)
    firsts = [f.result(0).offset for f in futures]
    assert start == len(OLD)
    assert firsts == [start, start + 3, start + 6]
    assert [f.result(0).offset for f in singles] == list(range(start + 9, start + 19))
    assert stored(bootstrap, topic) == expected_after(start)


def test_the_async_producer_starts_over_under_a_fresh_id(bootstrap):
    """AsyncProducer's batches (three in flight at once, then single records) sent after the partition forgot its
    id land once each, in send order, right after the trimmed batch: none fails with UNKNOWN_PRODUCER_ID."""
    topic = "forgotten-aio"
    create(bootstrap, topic)

    async def produce():
        async with AsyncProducer(bootstrap, linger_ms=0, max_in_flight_per_partition=3,
                                 delivery_timeout_ms=20_000) as producer:
            first = await producer.send_batch(topic, 0, OLD)
            start = await asyncio.to_thread(forget, bootstrap, topic, producer.producer_id, len(OLD))
            batches = await asyncio.gather(*(producer.send_batch(topic, 0, batch) for batch in NEW_BATCHES))
            singles = [await producer.enqueue(topic, value, partition=0) for value in SINGLES]
            await producer.flush(30)
            return first.offset, start, [m.offset for m in batches], [(await f).offset for f in singles]

    first, start, firsts, singles = asyncio.run(produce())
    assert (first, start) == (0, len(OLD))
    assert firsts == [start, start + 3, start + 6]
    assert singles == list(range(start + 9, start + 19))
    assert stored(bootstrap, topic) == expected_after(start)


def test_the_spark_sink_sender_goes_on_under_a_fresh_id(bootstrap):
    """A sink task whose partition forgot the task's derived producer id mid-task writes the rest of its records
    once each, in order, and its counts say they were appended (not already written)."""
    topic = "forgotten-sink"
    create(bootstrap, topic)
    task_id = derived_producer_id("write", "unknown-producer-test", 0)
    transport = StreamProduceTransport(Router(bootstrap))
    try:
        sender = SequencedSender(transport, task_id, batch_bytes_max=16_000, buffer_bytes_max=64_000,
                                 delivery_timeout_ms=20_000)
        now_ms = time.time_ns() // 1_000_000
        for value in OLD:
            sender.add((topic, 0), (now_ms, None, value, ()), record_size(None, value))
        assert sender.finish().appended == len(OLD)
        start = forget(bootstrap, topic, task_id, len(OLD))
        values = [v for batch in NEW_BATCHES for v in batch] + SINGLES
        for value in values:
            sender.add((topic, 0), (now_ms, None, value, ()), record_size(None, value))
        counts = sender.finish()
    finally:
        transport.close()
    assert (counts.appended, counts.already_written) == (len(OLD) + len(values), 0)
    assert stored(bootstrap, topic) == expected_after(start)
