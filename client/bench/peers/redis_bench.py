"""Redis Streams workloads (redis-py is imported here and nowhere else in raftbus).

One redis-server; the stream keys `bench:<p>` stand for the partitions (producers pipeline XADD runs of
--batch-records to each in turn; readers read each key through consumer group `readers`, one XACK per batch).
Queue: one key read by competing consumers of group `workers`, one XACK per message, pipelined per batch.
"""
from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

import redis

from raftbus.client import settings
from raftbus.bench.runner import LOOPBACK, emit, paced, progress, run_workers
from raftbus.bench.peers.figures import (
    check_count,
    latency_figures,
    load_result,
    producer_counts,
    shares,
    throughput_line,
)
from raftbus.bench.peers.servers import RedisServer, binary_version, running_redis

SYSTEM = "redis"
FIELD = b"v"
READ_GROUP, QUEUE_KEY, QUEUE_GROUP = "readers", "queue", "workers"
LATENCY_KEY = "bench:latency"
DURABILITY = {
    "everysec": "one node, no replica: acknowledged once in memory and written to the AOF in page cache "
                "(appendonly yes, appendfsync everysec); no RDB snapshots",
    "no": "one node, no replica, memory only (appendonly no, no RDB snapshots)",
}


@dataclass(frozen=True)
class RedisLoad:
    """What one load process does against the server at `port`."""

    port: int
    keys: tuple[str, ...]
    records: int = 0
    record_bytes: int = 100
    batch_records: int = 1_000
    group: str = ""
    consumer: str = ""


def partition_key(partition: int) -> str:
    return f"bench:{partition}"


def connect(port: int) -> redis.Redis:
    client = redis.Redis(host=LOOPBACK, port=port)
    client.ping()
    return client


def entries(reply) -> list[tuple[bytes, dict]]:
    """The (id, fields) entries of an XREADGROUP reply for one key (RESP2 list or RESP3 map)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return next(iter(reply.values()))[0]
    return reply[0][1]


# ---------------------------------------------------------------------- load processes

def produce_load(spec: RedisLoad, ready) -> dict:
    """Pipelined XADD, one pipeline of batch_records commands at a time, keys in turn."""
    client = connect(spec.port)
    payload = os.urandom(spec.record_bytes)
    ready()
    started_s, sent = time.monotonic(), 0
    for key in itertools.cycle(spec.keys):
        if sent >= spec.records:
            break
        run = min(spec.batch_records, spec.records - sent)
        pipe = client.pipeline(transaction=False)
        for _ in range(run):
            pipe.xadd(key, {FIELD: payload})
        pipe.execute()
        sent += run
    finished_s = time.monotonic()
    client.close()
    return load_result(sent, sent * spec.record_bytes, started_s, finished_s)


def consume_load(spec: RedisLoad, ready) -> dict:
    """Each key read to its end with XREADGROUP COUNT batch_records, one XACK of the whole batch."""
    client = connect(spec.port)
    ready()
    started_s = time.monotonic()
    records = value_bytes = 0
    for key in spec.keys:
        while batch := entries(client.xreadgroup(spec.group, spec.consumer, {key: ">"}, count=spec.batch_records)):
            value_bytes += sum(len(fields[FIELD]) for _, fields in batch)
            client.xack(key, spec.group, *(entry_id for entry_id, _ in batch))
            records += len(batch)
    finished_s = time.monotonic()
    client.close()
    return load_result(records, value_bytes, started_s, finished_s)


def queue_load(spec: RedisLoad, ready) -> dict:
    """Competing consumers: XREADGROUP a batch, then one XACK per message, pipelined; stop when none is left."""
    client = connect(spec.port)
    key = spec.keys[0]
    ready()
    started_s = time.monotonic()
    records = value_bytes = 0
    while batch := entries(client.xreadgroup(spec.group, spec.consumer, {key: ">"}, count=spec.batch_records)):
        pipe = client.pipeline(transaction=False)
        for entry_id, fields in batch:
            value_bytes += len(fields[FIELD])
            pipe.xack(key, spec.group, entry_id)
        pipe.execute()
        records += len(batch)
    finished_s = time.monotonic()
    client.close()
    return load_result(records, value_bytes, started_s, finished_s)


# ---------------------------------------------------------------------- workloads

def bench_produce(server: RedisServer, args, common: dict) -> dict:
    keys = tuple(partition_key(p) for p in range(args.partitions))
    specs = [RedisLoad(server.port, keys, count, args.record_bytes, args.batch_records)
             for count in producer_counts(args.records, args.producers)]
    progress(f"redis: XADD of {args.records} records with {len(specs)} producer process(es), pipelined")
    results = run_workers(produce_load, specs)
    progress(f"redis light load: {settings.BENCH_LIGHT_LOAD_RATE_PER_S} single XADDs/s "
             f"for {settings.BENCH_LIGHT_LOAD_DURATION_MS} ms")
    latencies_ms = light_load_latencies_ms(server.port, args.record_bytes)
    return throughput_line("produce", SYSTEM, results, args.record_bytes, producers=len(specs),
                           **latency_figures(latencies_ms, settings.BENCH_LIGHT_LOAD_RATE_PER_S), **common)


def light_load_latencies_ms(port: int, record_bytes: int) -> list[float]:
    """Single XADDs at a fixed rate; latency of each from send to reply."""
    client = connect(port)
    payload = os.urandom(record_bytes)
    latencies_ms = []
    for _ in paced(settings.BENCH_LIGHT_LOAD_RATE_PER_S * settings.BENCH_LIGHT_LOAD_DURATION_MS // 1000,
                   settings.BENCH_LIGHT_LOAD_RATE_PER_S):
        sent_s = time.perf_counter()
        client.xadd(LATENCY_KEY, {FIELD: payload})
        latencies_ms.append((time.perf_counter() - sent_s) * 1000)
    client.close()
    return latencies_ms


def bench_consume(server: RedisServer, args, common: dict) -> dict:
    client = connect(server.port)
    keys = [partition_key(p) for p in range(args.partitions)]
    for key in keys:
        client.xgroup_create(key, READ_GROUP, id="0", mkstream=True)
    client.close()
    specs = [RedisLoad(server.port, share, batch_records=args.batch_records, group=READ_GROUP, consumer=f"r{i}")
             for i, share in enumerate(shares(keys, args.readers))]
    progress(f"redis: reading the keys with {len(specs)} reader process(es) in group {READ_GROUP}")
    results = run_workers(consume_load, specs)
    line = throughput_line("consume", SYSTEM, results, args.record_bytes, readers=len(specs), **common)
    check_count("redis consume", args.records, line["records"])
    return line


def bench_queue(server: RedisServer, args, common: dict) -> dict:
    client = connect(server.port)
    client.xgroup_create(QUEUE_KEY, QUEUE_GROUP, id="0", mkstream=True)
    progress(f"redis: filling {QUEUE_KEY} with {args.queue_records} messages")
    run_workers(produce_load, [RedisLoad(server.port, (QUEUE_KEY,), count, args.record_bytes, args.batch_records)
                               for count in producer_counts(args.queue_records, args.producers)])
    specs = [RedisLoad(server.port, (QUEUE_KEY,), batch_records=args.batch_records, group=QUEUE_GROUP,
                       consumer=f"w{i}") for i in range(max(1, args.readers))]
    progress(f"redis: {len(specs)} worker process(es) reading in group {QUEUE_GROUP} and acking each message")
    results = run_workers(queue_load, specs)
    left = client.xpending(QUEUE_KEY, QUEUE_GROUP)["pending"]
    client.close()
    line = throughput_line("queue", SYSTEM, results, args.record_bytes, readers=len(specs), left_after_ack=left,
                           **common)
    check_count("redis queue", args.queue_records, line["records"])
    return line


def client_version() -> str:
    try:
        return f"redis-py {version('redis')} (hiredis {version('hiredis')})"
    except PackageNotFoundError:
        return f"redis-py {version('redis')}"


# ---------------------------------------------------------------------- entry

def run(args, lines: list[dict]) -> None:
    """Every Redis workload on a fresh server; one JSON line each, printed and appended to `lines`."""
    with running_redis(args.redis_appendonly) as server:
        common = {"servers": 1, "replication_factor": 1, "partitions": args.partitions,
                  "appendonly": args.redis_appendonly, "durability": DURABILITY[args.redis_appendonly],
                  "server_version": binary_version(server.binary), "client": client_version()}
        for workload in (bench_produce, bench_consume, bench_queue, no_failover):
            lines.append(emit(workload(server, args, common)))


def no_failover(_server: RedisServer, _args, common: dict) -> dict:
    return {"bench": "failover", "system": SYSTEM, "failover_ms": None, "note": "single node: no failover", **common}
