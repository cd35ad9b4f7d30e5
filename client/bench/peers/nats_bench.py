"""NATS JetStream workloads (nats-py is imported by this module and its nats_* siblings only).

One file-storage stream with replicas=3 stands for the raftbus topic; its subjects `bench.<p>` stand for the
partitions (producers write them round-robin in runs of --batch-records, readers read each through its own
filtered pull consumer). Queue: a work-queue retention stream (R3) with one shared explicit-ack pull consumer.
Key-value: a bucket (R3, file) beside `raftbus bench kv`'s Table figures (nats_kv.py).
"""
from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass
from importlib.metadata import version

import nats

from raftbus.client import settings
from raftbus.bench.runner import emit, paced_async, progress, run_workers
from raftbus.bench.peers.figures import (
    check_count,
    latency_figures,
    load_result,
    producer_counts,
    shares,
    throughput_line,
)
from raftbus.bench.peers.nats_failover import bench_failover
from raftbus.bench.peers.nats_kv import bench_kv
from raftbus.bench.peers.nats_streams import (
    QUEUE_CONSUMER,
    QUEUE_STREAM,
    QUEUE_SUBJECT,
    REPLICAS,
    STREAM,
    STREAM_READY_POLL_MS,
    SUBJECT_PREFIX,
    SYSTEM,
    add_streams,
    partition_consumer,
    partition_subject,
    stream_state,
)
from raftbus.bench.peers.servers import NatsCluster, binary_version, running_nats
from raftbus.client.errors import InternalError

DURABILITY = ("file storage, replicas=3: acknowledged once a majority stored it (page cache; "
              "nats-server fsyncs every 2 min by default)")
PUBLISH_PENDING_MAX = 4_000  # outstanding publish_async acks per connection (nats-py's default)
FETCH_WAIT_MS = 500
PUBLISH_TIMEOUT_MS = 10_000
QUEUE_DRAIN_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class NatsLoad:
    """What one load process does against the cluster at `servers`."""

    servers: tuple[str, ...]
    stream: str
    subjects: tuple[str, ...] = ()
    consumers: tuple[str, ...] = ()
    records: int = 0
    record_bytes: int = 100
    batch_records: int = 1_000


# ---------------------------------------------------------------------- load processes

def produce_load(spec: NatsLoad, ready) -> dict:
    return asyncio.run(_produce(spec, ready))


async def _produce(spec: NatsLoad, ready) -> dict:
    """publish_async with up to PUBLISH_PENDING_MAX acks outstanding; done when every ack came back."""
    nc = await nats.connect(servers=list(spec.servers))
    failures: list[BaseException] = []

    def check(future: asyncio.Future) -> None:
        if not future.cancelled() and future.exception() is not None:
            failures.append(future.exception())

    try:
        js = nc.jetstream(publish_async_max_pending=PUBLISH_PENDING_MAX)
        payload = os.urandom(spec.record_bytes)
        ready()
        started_s, sent = time.monotonic(), 0
        for subject in itertools.cycle(spec.subjects):
            if sent >= spec.records:
                break
            run = min(spec.batch_records, spec.records - sent)
            for _ in range(run):
                (await js.publish_async(subject, payload)).add_done_callback(check)
            sent += run
        await asyncio.wait_for(js.publish_async_completed(), PUBLISH_TIMEOUT_MS / 1000)
        finished_s = time.monotonic()
    finally:
        await nc.close()
    if failures:
        raise InternalError(f"{len(failures)} publishes failed, the first with {failures[0]!r}")
    return load_result(sent, sent * spec.record_bytes, started_s, finished_s)


def consume_load(spec: NatsLoad, ready) -> dict:
    return asyncio.run(_consume(spec, ready))


async def _consume(spec: NatsLoad, ready) -> dict:
    """Each partition's consumer read to its end in batches, one synchronous AckAll per batch."""
    nc = await nats.connect(servers=list(spec.servers))
    try:
        js = nc.jetstream()
        subs = [await js.pull_subscribe_bind(durable=name, stream=spec.stream) for name in spec.consumers]
        pending = [(await sub.consumer_info()).num_pending for sub in subs]
        ready()
        started_s = time.monotonic()
        records = value_bytes = 0
        for sub, count in zip(subs, pending):
            read = 0
            while read < count:
                msgs = await sub.fetch(min(spec.batch_records, count - read), timeout=FETCH_WAIT_MS / 1000)
                read += len(msgs)
                value_bytes += sum(len(msg.data) for msg in msgs)
                await msgs[-1].ack_sync(timeout=PUBLISH_TIMEOUT_MS / 1000)
            records += read
        finished_s = time.monotonic()
    finally:
        await nc.close()
    return load_result(records, value_bytes, started_s, finished_s)


def queue_load(spec: NatsLoad, ready) -> dict:
    return asyncio.run(_work(spec, ready))


async def _work(spec: NatsLoad, ready) -> dict:
    """Competing workers on one explicit-ack consumer: fetch a batch, ack every message; stop when none is left."""
    nc = await nats.connect(servers=list(spec.servers))
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe_bind(durable=spec.consumers[0], stream=spec.stream)
        ready()
        started_s = finished_s = time.monotonic()
        records = value_bytes = 0
        while True:
            try:
                msgs = await sub.fetch(spec.batch_records, timeout=FETCH_WAIT_MS / 1000)
            except asyncio.TimeoutError:  # nats-py raises its own subclass or the plain one
                if (await sub.consumer_info()).num_pending == 0:
                    break
                continue
            for msg in msgs:
                value_bytes += len(msg.data)
                await msg.ack()
            records += len(msgs)
            await nc.flush()
            finished_s = time.monotonic()
    finally:
        await nc.close()
    return load_result(records, value_bytes, started_s, finished_s)


# ---------------------------------------------------------------------- workloads

def bench_produce(cluster: NatsCluster, args, common: dict) -> dict:
    subjects = tuple(partition_subject(p) for p in range(args.partitions))
    specs = [NatsLoad(cluster.urls, STREAM, subjects, records=count, record_bytes=args.record_bytes,
                      batch_records=args.batch_records) for count in producer_counts(args.records, args.producers)]
    progress(f"nats: publishing {args.records} records with {len(specs)} producer process(es)")
    results = run_workers(produce_load, specs)
    progress(f"nats light load: {settings.BENCH_LIGHT_LOAD_RATE_PER_S} single-record publishes/s "
             f"for {settings.BENCH_LIGHT_LOAD_DURATION_MS} ms")
    latencies_ms = asyncio.run(light_load_latencies_ms(cluster.urls, args.record_bytes))
    return throughput_line("produce", SYSTEM, results, args.record_bytes, producers=len(specs),
                           **latency_figures(latencies_ms, settings.BENCH_LIGHT_LOAD_RATE_PER_S), **common)


async def light_load_latencies_ms(urls: tuple[str, ...], record_bytes: int) -> list[float]:
    """publish_async at a fixed rate; latency of each from publish to its acknowledgement."""
    rate_per_s = settings.BENCH_LIGHT_LOAD_RATE_PER_S
    count = rate_per_s * settings.BENCH_LIGHT_LOAD_DURATION_MS // 1000
    payload = os.urandom(record_bytes)
    subject = f"{SUBJECT_PREFIX}.latency"
    latencies_ms: list[float] = []
    nc = await nats.connect(servers=list(urls))
    try:
        js = nc.jetstream()
        await js.publish(subject, payload)  # connect and route before measuring
        async for _ in paced_async(count, rate_per_s):
            sent_s = time.perf_counter()
            future = await js.publish_async(subject, payload)
            future.add_done_callback(lambda _f, s=sent_s: latencies_ms.append((time.perf_counter() - s) * 1000))
        await asyncio.wait_for(js.publish_async_completed(), PUBLISH_TIMEOUT_MS / 1000)
    finally:
        await nc.close()
    return latencies_ms


def bench_consume(cluster: NatsCluster, args, common: dict) -> dict:
    readers = shares([partition_consumer(p) for p in range(args.partitions)], args.readers)
    specs = [NatsLoad(cluster.urls, STREAM, consumers=names, batch_records=args.batch_records) for names in readers]
    progress(f"nats: reading {STREAM} with {len(specs)} reader process(es), one consumer per partition")
    results = run_workers(consume_load, specs)
    line = throughput_line("consume", SYSTEM, results, args.record_bytes, readers=len(specs), **common)
    check_count("nats consume", args.records, line["records"])
    return line


def bench_queue(cluster: NatsCluster, args, common: dict) -> dict:
    fill = [NatsLoad(cluster.urls, QUEUE_STREAM, (QUEUE_SUBJECT,), records=count, record_bytes=args.record_bytes,
                     batch_records=args.batch_records) for count in producer_counts(args.queue_records, args.producers)]
    progress(f"nats: filling work queue {QUEUE_STREAM} with {args.queue_records} messages")
    run_workers(produce_load, fill)
    workers = [NatsLoad(cluster.urls, QUEUE_STREAM, consumers=(QUEUE_CONSUMER,), batch_records=args.batch_records)
               for _ in range(max(1, args.readers))]
    progress(f"nats: {len(workers)} worker process(es) fetching and acking each message")
    results = run_workers(queue_load, workers)
    line = throughput_line("queue", SYSTEM, results, args.record_bytes, readers=len(workers),
                           left_after_ack=asyncio.run(queue_left(cluster.urls)), **common)
    check_count("nats queue", args.queue_records, line["records"])
    return line


async def queue_left(urls: tuple[str, ...]) -> int:
    """Messages still in the work queue once the acks had QUEUE_DRAIN_TIMEOUT_MS to apply (0 when all did)."""
    deadline = time.monotonic() + QUEUE_DRAIN_TIMEOUT_MS / 1000
    while True:
        _, left = await stream_state(urls, QUEUE_STREAM)
        if left == 0 or time.monotonic() > deadline:
            return left
        await asyncio.sleep(STREAM_READY_POLL_MS / 1000)


# ---------------------------------------------------------------------- entry

def run(args, lines: list[dict]) -> None:
    """Every NATS workload on a fresh cluster; one JSON line each, printed and appended to `lines`."""
    with running_nats() as cluster:
        asyncio.run(add_streams(cluster.urls, args.partitions))
        common = {"servers": len(cluster.servers), "replication_factor": REPLICAS, "partitions": args.partitions,
                  "durability": DURABILITY, "server_version": binary_version(cluster.binary),
                  "client": f"nats-py {version('nats-py')}"}
        for workload in (bench_produce, bench_consume, bench_queue, bench_kv, bench_failover):
            lines.append(emit(workload(cluster, args, common)))
