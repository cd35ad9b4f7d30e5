"""Goal: AsyncProducer's path for the common record (a keyless bytes value appended to its sticky partition's open
batch without enqueue's coroutine calls) sends exactly what enqueue's whole path sends: the same batches, in the
same order, with the same sequences and records, and every future the same offset; driven by a fake router and
a fake produce stream that answers each batch at once."""
import asyncio
import random
from types import SimpleNamespace

import pytest

from raftbus.client.aio.producer import AsyncProducer
from raftbus.client.records import decode_batch

TOPIC = "t"
PARTITIONS = 3


class FakeRouter:
    request_timeout_s = 1.0

    def __init__(self, kind: str = "stream"):
        self.kind = kind
        self.map = object()

    def fresh_map(self):
        return self.map

    async def topic_kind(self, topic):
        return self.kind

    async def partitions_for(self, topic):
        return PARTITIONS

    async def close(self):
        pass


class FakeStreams:
    """Answers every ProduceRequest at once with consecutive offsets per partition, and records it."""

    def __init__(self):
        self.next_offset: dict[int, int] = {}
        self.sent: list[tuple[int, int, int, list[bytes]]] = []  # (partition, base_sequence, count, values)

    async def produce(self, request):
        base = self.next_offset.get(request.partition, 0)
        self.next_offset[request.partition] = base + request.record_count
        values = [record[2] for record in decode_batch(request.records)]
        self.sent.append((request.partition, request.base_sequence, request.record_count, values))
        return SimpleNamespace(base_offset=base)

    async def close(self):
        pass


async def produce(seed: int, fast: bool, monkeypatch) -> tuple[list, list, int, int]:
    producer = AsyncProducer("127.0.0.1:1", linger_ms=60_000, batch_bytes_max=2_000, buffer_bytes_max=1_000_000,
                             max_block_ms=1_000)
    producer.router, producer._streams = FakeRouter(), FakeStreams()
    taken = [0]
    append = producer._append_to_open

    def counted(topic, value):
        future = append(topic, value) if fast else None
        taken[0] += future is not None
        return future

    monkeypatch.setattr(producer, "_append_to_open", counted)
    rng = random.Random(seed)
    futures = []
    for i in range(400):
        value = rng.randbytes(rng.choice((10, 100, 100, 100, 700, 1_900)))
        roll = rng.random()
        if roll < 0.1:
            futures.append(await producer.enqueue(TOPIC, value, key=b"k%d" % rng.randrange(5)))
        elif roll < 0.15:
            futures.append(await producer.enqueue(TOPIC, value, partition=rng.randrange(PARTITIONS)))
        elif roll < 0.2:
            futures.append(asyncio.ensure_future(producer.send(TOPIC, value)))
        else:
            futures.append(await producer.enqueue(TOPIC, value))
        if rng.random() < 0.05:
            await producer.flush()
    await producer.flush()
    landed = [((await f).partition, (await f).offset) for f in futures]
    buffered = producer._buffered_bytes
    await producer.close()
    return producer._streams.sent, landed, taken[0], buffered


@pytest.mark.parametrize("seed", range(8))
def test_the_common_records_path_sends_what_the_whole_path_sends(seed, monkeypatch):
    sent_fast, landed_fast, taken, buffered_fast = asyncio.run(produce(seed, True, monkeypatch))
    sent_whole, landed_whole, _, buffered_whole = asyncio.run(produce(seed, False, monkeypatch))
    assert taken > 100  # the common path carried most records
    assert sent_fast == sent_whole
    assert landed_fast == landed_whole
    assert buffered_fast == buffered_whole == 0


def test_a_queue_topic_never_takes_the_common_records_path(monkeypatch):
    """On a queue topic every record goes through enqueue's whole path (message batches, not stream batches)."""
    async def main():
        producer = AsyncProducer("127.0.0.1:1", linger_ms=60_000)
        producer.router, producer._streams = FakeRouter("queue"), FakeStreams()
        await producer._topic_shape(TOPIC)
        assert producer._append_to_open(TOPIC, b"v") is None
        await producer.close()

    asyncio.run(main())


def test_a_full_buffer_sends_the_record_down_the_whole_path(monkeypatch):
    """A record that would pass buffer_bytes_max is not appended by the common path (the whole path blocks for room,
    then raises Overloaded after max_block_ms)."""
    async def main():
        producer = AsyncProducer("127.0.0.1:1", linger_ms=60_000, batch_bytes_max=1_000, buffer_bytes_max=1_000,
                                 max_block_ms=50)
        producer.router, producer._streams = FakeRouter(), FakeStreams()
        elsewhere = await producer.enqueue(TOPIC, bytes(500), partition=1)  # 518 bytes held by another batch
        first = await producer.enqueue(TOPIC, bytes(300))  # the sticky partition's batch: 318
        assert producer._append_to_open(TOPIC, bytes(100)) is not None  # batch 436, buffer 954 of 1,000
        assert producer._append_to_open(TOPIC, bytes(100)) is None  # the batch has room, the buffer not (1,072)
        assert producer._buffered_bytes == 954
        await producer.flush()
        assert ((await first).offset, (await elsewhere).offset) == (0, 0)
        await producer.close()

    asyncio.run(main())
