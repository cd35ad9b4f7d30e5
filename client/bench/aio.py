"""`raftbus bench aio`: the asyncio SDK's figures, one JSON line (`"bench": "aio"`). Every record is acknowledged
only after its batch is committed on a majority of the partition's replicas and applied on the leader.

1. light load, once the topic's leaders sit on their preferred replicas (as `bench produce`): single-record
   `AsyncProducer.send` at BENCH_LIGHT_LOAD_RATE_PER_S for BENCH_LIGHT_LOAD_DURATION_MS with linger 0, each
   awaited from its own task — latency_p50/p99_ms, send to acknowledgement;
2. `--records` records of `--record-bytes` bytes by `--producers` processes, each one event loop:
   - send_records_per_s: `AsyncProducer.send` per record, awaited by BENCH_AIO_SENDERS concurrent tasks;
   - enqueue_records_per_s: `AsyncProducer.enqueue` per record, then `flush()` and every future's result;
   - send_batch_records_per_s: `AsyncProducer.send_batch`, whole batches, BENCH_BATCHES_QUEUED_PER_PARTITION
     per partition unacknowledged at a time;
3. consume_records_per_s: one `AsyncConsumer` (a group of one member, one process) reads the send_batch topic
   from the earliest offset, decoding every record and committing after each poll, from its first records
   to its last commit;
4. reader_records_per_s: one `AsyncReader` (no group, one process) reads every partition of the send_batch
   topic from the beginning to its end (`iter_topic(..., stop_at_end=True)`), decoding every record.
"""
from __future__ import annotations

import asyncio
import itertools
import os
import time

from raftbus.client import settings
from raftbus.client.reader import EARLIEST

from raftbus.client.aio.consumer import AsyncConsumer
from raftbus.client.aio.producer import AsyncProducer
from raftbus.client.aio.reader import AsyncReader

APIS = ("send", "enqueue", "send_batch")


# ---------------------------------------------------------------------- load processes (bench.run_workers)
def produce_load(spec, ready) -> dict:
    """One process, one event loop: spec.records records through the API named in spec.topic's suffix."""
    return asyncio.run(_produce(spec, ready))


async def _produce(spec, ready) -> dict:
    api = spec.topic.rsplit("-", 1)[-1]  # bench_aio names each topic after the API that fills it
    value = os.urandom(spec.record_bytes)
    async with AsyncProducer(spec.bootstrap, linger_ms=spec.linger_ms, batch_bytes_max=spec.batch_bytes_max) as p:
        await p.send(spec.topic, value)  # metadata and the first stream, before the clock starts
        ready()
        started_s = time.monotonic()
        await {"send": _per_record_send, "enqueue": _per_record_enqueue, "send_batch": _batches}[api](p, spec, value)
        finished_s = time.monotonic()
    return {"records": spec.records, "value_bytes": spec.records * spec.record_bytes, "started_s": started_s,
            "finished_s": finished_s}


async def _per_record_send(producer: AsyncProducer, spec, value: bytes) -> None:
    async def sender(count: int) -> None:
        for _ in range(count):
            await producer.send(spec.topic, value)

    shares = [len(range(i, spec.records, settings.BENCH_AIO_SENDERS)) for i in range(settings.BENCH_AIO_SENDERS)]
    await asyncio.gather(*(sender(share) for share in shares if share))


async def _per_record_enqueue(producer: AsyncProducer, spec, value: bytes) -> None:
    futures = [await producer.enqueue(spec.topic, value) for _ in range(spec.records)]
    await producer.flush()
    for future in futures:  # every record acknowledged (an error would raise here)
        future.result()


async def _batches(producer: AsyncProducer, spec, value: bytes) -> None:
    per_batch = max(1, spec.batch_bytes_max // (spec.record_bytes + 64))
    window = asyncio.Semaphore(settings.BENCH_BATCHES_QUEUED_PER_PARTITION * len(spec.partitions))

    async def one(partition: int, count: int) -> None:
        async with window:
            await producer.send_batch(spec.topic, partition, [value] * count)

    sends, sent = [], 0
    for partition in itertools.cycle(spec.partitions):
        if sent >= spec.records:
            break
        count = min(per_batch, spec.records - sent)
        sends.append(asyncio.ensure_future(one(partition, count)))
        sent += count
    await asyncio.gather(*sends)


# ---------------------------------------------------------------------- the workload
def light_load_latencies_ms(bootstrap: str, topic: str, record_bytes: int) -> list[float]:
    return asyncio.run(_light_load(bootstrap, topic, record_bytes))


async def _light_load(bootstrap: str, topic: str, record_bytes: int) -> list[float]:
    rate_per_s = settings.BENCH_LIGHT_LOAD_RATE_PER_S
    count = rate_per_s * settings.BENCH_LIGHT_LOAD_DURATION_MS // 1000
    value = os.urandom(record_bytes)
    latencies_ms: list[float] = []

    async def timed() -> None:
        sent = time.perf_counter()
        await producer.send(topic, value)
        latencies_ms.append((time.perf_counter() - sent) * 1000)

    async with AsyncProducer(bootstrap, linger_ms=0) as producer:
        for partition in range(await producer.router.partitions_for(topic)):  # every leader's stream, first
            await producer.send(topic, value, partition=partition)
        started = time.perf_counter()
        sends = []
        for i in range(count):
            await asyncio.sleep(max(0.0, started + i / rate_per_s - time.perf_counter()))
            sends.append(asyncio.ensure_future(timed()))
        await asyncio.gather(*sends)
    return latencies_ms


async def _consume(bootstrap: str, topic: str, total: int) -> dict:
    group = f"bench-aio-{time.time_ns() // 1_000_000}"
    records = commits = 0
    first_records_s = None
    async with AsyncConsumer(bootstrap, group=group, topics=topic, auto_offset_reset=EARLIEST,
                             enable_auto_commit=False, max_poll_records=settings.BENCH_GROUP_POLL_RECORDS_MAX,
                             fetch_bytes_max=settings.BENCH_GROUP_FETCH_BYTES_MAX) as consumer:
        while records < total:
            polled = await consumer.poll(1.0)
            if polled and first_records_s is None:
                first_records_s = time.monotonic()
            records += sum(1 for _ in polled)
            if polled:
                await consumer.commit()
                commits += 1
        finished_s = time.monotonic()
    return {"consume_records": records, "consume_commits": commits,
            "consume_records_per_s": round(records / max(finished_s - first_records_s, 1e-9))}


async def _read(bootstrap: str, topic: str) -> dict:
    """One AsyncReader reads every partition of `topic` from the beginning to its end, decoding every record."""
    records = 0
    async with AsyncReader(bootstrap) as reader:
        await reader.partitions(topic)  # metadata, before the clock starts
        started_s = time.monotonic()
        async for record in reader.iter_topic(topic, from_beginning=True, stop_at_end=True):
            records += 1
        finished_s = time.monotonic()
    return {"reader_records": records, "reader_records_per_s": round(records / max(finished_s - started_s, 1e-9))}


async def _consume_then_read(bootstrap: str, topic: str, total: int, progress) -> dict:
    """Both reads on one event loop (grpc.aio keeps a poller per loop; a third asyncio.run trips over the old one)."""
    figures = await _consume(bootstrap, topic, total)
    progress("aio: one AsyncReader reads the send_batch topic")
    figures.update(await _read(bootstrap, topic))
    return figures


def bench_aio(bootstrap: str, args, tools) -> dict:
    """`tools`: the sync bench module (ensure_topic, load_specs, run_workers, combined, percentile, progress...)."""
    stamp = time.time_ns() // 1_000_000
    latency_topic = f"bench-aio-{stamp}-latency"
    brokers = tools.ensure_topic(bootstrap, latency_topic, args)
    if not tools.wait_for_preferred_leaders(bootstrap, latency_topic,
                                            settings.BENCH_PREFERRED_LEADERS_TIMEOUT_MS / 1000):
        tools.progress("leaders of the latency topic did not settle on their preferred replicas; measuring anyway")
    tools.progress(f"aio light load: {settings.BENCH_LIGHT_LOAD_RATE_PER_S} AsyncProducer.send/s")
    latencies_ms = light_load_latencies_ms(bootstrap, latency_topic, args.record_bytes)
    figures = {"latency_p50_ms": tools.rounded_ms(tools.percentile(latencies_ms, 0.50)),
               "latency_p99_ms": tools.rounded_ms(tools.percentile(latencies_ms, 0.99))}
    for api in APIS:
        topic = f"bench-aio-{stamp}-{api}"
        tools.ensure_topic(bootstrap, topic, args)
        tools.progress(f"aio: {args.records} records by AsyncProducer.{api} in {args.producers} process(es)")
        records, _, elapsed_s = tools.combined(tools.run_workers(produce_load, tools.load_specs(
            bootstrap, topic, args.records, args)))
        figures[f"{api}_records_per_s"] = round(records / elapsed_s)
    tools.progress("aio: one AsyncConsumer reads the send_batch topic")
    figures.update(asyncio.run(_consume_then_read(bootstrap, f"bench-aio-{stamp}-send_batch", args.records,
                                                  tools.progress)))
    return {"bench": "aio", **figures, "records": args.records, "record_bytes": args.record_bytes,
            "producers": args.producers, "senders_per_process": settings.BENCH_AIO_SENDERS,
            "brokers": brokers, "partitions": args.partitions, "replication_factor": args.replication_factor,
            "linger_ms": args.linger_ms, "durability": "acked after majority commit"}
