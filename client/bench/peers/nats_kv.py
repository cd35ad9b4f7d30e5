"""NATS JetStream key-value: the peer of `raftbus bench kv`'s Table figures (nats-py is imported here only).

One bucket, file storage, replicas=3, history 1, holding `--kv-keys` keys of `--record-bytes` values; gets go to
the bucket's stream leader (direct gets off: a direct get may be answered by any replica), which answers from its
state without a quorum round (raftbus's Table.get waits for a ReadIndex round). `kv.get` of random keys by
`--readers` processes and `kv.update(key, value, last=revision)` (compare-and-set) by `--producers` processes, each
over BENCH_KV_CAS_KEYS keys of its own, one call in flight per process, for BENCH_KV_MEASURE_MS each.
"""
from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass

import nats
from nats.js.api import KeyValueConfig, StorageType

from raftbus.bench.kv import key_name
from raftbus.bench.runner import percentile, progress, rounded_ms, run_workers
from raftbus.client import settings

BUCKET = "bench_kv"
FILL_IN_FLIGHT = 200  # puts awaited together while the bucket is filled


@dataclass(frozen=True)
class KvLoad:
    servers: tuple[str, ...]
    keys: tuple[str, ...]
    calls: str  # "get" or "cas"
    duration_ms: int
    record_bytes: int
    seed: int = 0


def kv_load(spec: KvLoad, ready) -> dict:
    return asyncio.run(_kv_load(spec, ready))


async def _kv_load(spec: KvLoad, ready) -> dict:
    rng = random.Random(spec.seed)
    value = os.urandom(spec.record_bytes)
    nc = await nats.connect(servers=list(spec.servers))
    try:
        kv = await nc.jetstream().key_value(BUCKET)
        cas = spec.calls == "cas"
        revisions = {key: (await kv.get(key)).revision for key in spec.keys} if cas else {}
        await kv.get(spec.keys[0])
        ready()
        latencies_ms: list[float] = []
        started_s = time.monotonic()
        deadline = started_s + spec.duration_ms / 1000
        while time.monotonic() < deadline:
            key = rng.choice(spec.keys)
            sent = time.perf_counter()
            if cas:
                revisions[key] = await kv.update(key, value, last=revisions[key])
            else:
                await kv.get(key)
            latencies_ms.append((time.perf_counter() - sent) * 1000)
        finished_s = time.monotonic()
    finally:
        await nc.close()
    return {"records": len(latencies_ms), "value_bytes": 0, "started_s": started_s, "finished_s": finished_s,
            "latencies_ms": latencies_ms}


async def create_and_fill(servers: tuple[str, ...], keys: list[str], record_bytes: int) -> None:
    value = os.urandom(record_bytes)
    nc = await nats.connect(servers=list(servers))
    try:
        kv = await nc.jetstream().create_key_value(KeyValueConfig(
            bucket=BUCKET, history=1, replicas=3, storage=StorageType.FILE, direct=False))
        for start in range(0, len(keys), FILL_IN_FLIGHT):
            await asyncio.gather(*(kv.put(key, value) for key in keys[start:start + FILL_IN_FLIGHT]))
    finally:
        await nc.close()


def _rate(results: list[dict]) -> float:
    calls = sum(r["records"] for r in results)
    elapsed_s = max(r["finished_s"] for r in results) - min(r["started_s"] for r in results)
    return calls / elapsed_s if elapsed_s > 0 else 0.0


def bench_kv(cluster, args, common: dict) -> dict:
    keys = [key_name(i).decode() for i in range(args.kv_keys)]
    progress(f"nats: filling key-value bucket {BUCKET} (R3, file) with {len(keys)} keys of {args.record_bytes} bytes")
    asyncio.run(create_and_fill(cluster.urls, keys, args.record_bytes))
    measure_ms = settings.BENCH_KV_MEASURE_MS
    readers = [KvLoad(cluster.urls, tuple(keys), "get", measure_ms, args.record_bytes, seed)
               for seed in range(max(1, args.readers))]
    progress(f"nats: kv.get of random keys, {len(readers)} process(es), {measure_ms} ms")
    gets = run_workers(kv_load, readers)
    writers = [KvLoad(cluster.urls, tuple(keys[i::max(1, args.producers)][:settings.BENCH_KV_CAS_KEYS]), "cas",
                      measure_ms, args.record_bytes, i) for i in range(max(1, args.producers))]
    progress(f"nats: kv.update with last=revision, {len(writers)} process(es), {measure_ms} ms")
    puts = run_workers(kv_load, writers)
    get_ms = [ms for r in gets for ms in r["latencies_ms"]]
    put_ms = [ms for r in puts for ms in r["latencies_ms"]]
    return {"bench": "kv", "system": "nats", "keys": len(keys), "record_bytes": args.record_bytes,
            "gets": len(get_ms), "gets_per_s": round(_rate(gets)),
            "get_p50_ms": rounded_ms(percentile(get_ms, 0.50)), "get_p99_ms": rounded_ms(percentile(get_ms, 0.99)),
            "cas_puts": len(put_ms), "cas_puts_per_s": round(_rate(puts)),
            "cas_put_p50_ms": rounded_ms(percentile(put_ms, 0.50)),
            "cas_put_p99_ms": rounded_ms(percentile(put_ms, 0.99)),
            "readers": len(readers), "producers": len(writers), "measure_ms": measure_ms,
            "gets_from": "the stream leader (direct gets off)", **common}
