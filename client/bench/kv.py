"""`raftbus bench kv`: key-value tables and compaction (docs/compaction.md).

Table (raftbus.client.Table over a table of `--partitions` partitions holding `--kv-keys` keys of `--record-bytes`
values, filled with keyed batches, each key in its murmur2 partition):
  gets_per_s, get_p50_ms, get_p99_ms
      Table.get of random keys by `--readers` processes, one call in flight each, for BENCH_KV_MEASURE_MS; each
      call from send to answer (linearizable: the leader answers from its key index after a ReadIndex confirmation)
  cas_puts_per_s, cas_put_p50_ms, cas_put_p99_ms
      Table.put with expected_revision (compare-and-set, acknowledged after a majority commit) by `--producers`
      processes, one in flight each, each over BENCH_KV_CAS_KEYS keys of its own whose revisions it knows
Compaction (two compacted topics of `--partitions` partitions, each filled with `--compaction-records` records over
the same `--kv-keys` keys, so all but each key's latest record go; segment_bytes at its largest until it is set to 1,
so a pass starts only then):
  compaction_mb_per_s
      stored bytes the passes read (the whole log below each partition's last batch; MB = 10^6 bytes of stored
      batches, headers and keys included) over the time the compactors spent in those passes (planning, proposing
      and waiting for each command to commit), both topics, from BrokerStats; bounded by compaction_bytes_per_s
  compaction_scanned_mb, compaction_removed_mb, compaction_busy_s
  produce_latency_p50/p99/max_ms_without_compaction, produce_latency_p50/p99/max_ms_during_compaction
      single-record sends (linger 0, acknowledged after a majority commit) at BENCH_KV_LIGHT_LOAD_RATE_PER_S to
      another topic of the same brokers, for BENCH_KV_MEASURE_MS, then while the first topic is compacted: how
      long a pass holds a produce up
  fetch_latency_p50/p99_ms_without_compaction, fetch_latency_p50/p99/max_ms_during_compaction
      Reader.fetch of the last acknowledged record of that topic (one at a time, at the same rate, from another
      thread), to its answer after the ReadIndex confirmation, in the same windows: how long a pass holds a fetch up
  produce_records_per_s_without_compaction, produce_records_per_s_during_compaction, produce_during_compaction_ratio
      `--producers` processes sending whole batches (as `bench produce`) to that other topic for
      BENCH_KV_MEASURE_MS, while the second topic is compacted (compaction_wall_s_under_load), and for
      BENCH_KV_MEASURE_MS after; "without" is the mean of before and after, the ratio is during / without
"""
from __future__ import annotations

import itertools
import multiprocessing
import os
import queue
import random
import threading
import time
from dataclasses import dataclass

from raftbus.client import settings
from raftbus.client.admin import Admin
from raftbus.client.errors import InternalError, RequestTimedOut
from raftbus.client.murmur2 import partition_for_key
from raftbus.client.producer import Producer
from raftbus.client.reader import Reader
from raftbus.client.table import Table

SEGMENT_BYTES_NEVER = 1 << 62  # no pass starts until the measurement sets segment_bytes to 1
KEYED_BATCH_RECORDS = 1_000
PASS_POLL_S = 0.1
PROGRESS_EVERY_S = 5.0


def add_kv_arguments(parser) -> None:
    parser.add_argument("--kv-keys", type=int, default=settings.BENCH_KV_KEYS,
                        help="kv: keys of the table and of the compacted topic")
    parser.add_argument("--compaction-records", type=int, default=settings.BENCH_KV_COMPACTION_RECORDS,
                        help="kv: records written over those keys before the compaction is timed")


@dataclass(frozen=True)
class KvLoad:
    """What one kv load process does: `calls` "get" or "cas" on `topic` over `keys`, for `duration_ms`."""

    bootstrap: str
    topic: str
    keys: tuple[bytes, ...]
    calls: str
    duration_ms: int
    record_bytes: int = 100
    seed: int = 0


def key_name(i: int) -> bytes:
    return b"key-%08d" % i


def keys_by_partition(keys: int, partitions: int) -> list[list[bytes]]:
    """Keys key-00000000... dealt to the partition the producers' partitioner gives each (as Table does)."""
    out: list[list[bytes]] = [[] for _ in range(partitions)]
    for i in range(keys):
        key = key_name(i)
        out[partition_for_key(key, partitions)].append(key)
    return out


def fill_keyed(bootstrap: str, topic: str, by_partition: list[list[bytes]], records: int, record_bytes: int) -> None:
    """`records` keyed records over the keys, each key in its own partition, cycling over each partition's keys."""
    value = os.urandom(record_bytes)
    cycles = [itertools.cycle(keys) for keys in by_partition if keys]
    partitions = [p for p, keys in enumerate(by_partition) if keys]
    with Producer(bootstrap) as producer:
        futures, sent = [], 0
        for partition, cycle in itertools.cycle(zip(partitions, cycles)):
            if sent >= records:
                break
            count = min(KEYED_BATCH_RECORDS, records - sent)
            futures.append(producer.send_batch(topic, partition, [(next(cycle), value) for _ in range(count)]))
            sent += count
            if len(futures) >= settings.BENCH_BATCHES_QUEUED_PER_PARTITION * len(partitions):
                futures.pop(0).result()
        producer.flush()
        for future in futures:
            future.result()


# ---------------------------------------------------------------------- load processes (runner.run_workers)

def table_load(spec: KvLoad, ready) -> dict:
    rng = random.Random(spec.seed)
    value = os.urandom(spec.record_bytes)
    latencies_ms: list[float] = []
    with Table(spec.bootstrap, spec.topic) as table:
        table.get(spec.keys[0])  # connected before the measurement
        cas = spec.calls == "cas"
        revisions = {key: table.revision(key) for key in spec.keys} if cas else {}  # what each CAS expects
        ready()
        started_s = time.monotonic()
        deadline = started_s + spec.duration_ms / 1000
        while time.monotonic() < deadline:
            key = rng.choice(spec.keys)
            sent = time.perf_counter()
            if cas:
                revisions[key] = table.put(key, value, expected_revision=revisions[key])
            else:
                table.get(key)
            latencies_ms.append((time.perf_counter() - sent) * 1000)
        finished_s = time.monotonic()
    return {"records": len(latencies_ms), "value_bytes": 0, "started_s": started_s, "finished_s": finished_s,
            "latencies_ms": latencies_ms}


def produce_until(bootstrap: str, topic: str, partitions: int, record_bytes: int, commands, answers) -> None:
    """A producer process: on each "run" command, send whole batches (as `bench produce`) until "stop", then
    answer (records acknowledged, seconds); "exit" ends it."""
    from raftbus.bench.runner import records_per_batch

    value = os.urandom(record_bytes)
    full = [value] * records_per_batch(record_bytes, settings.BATCH_BYTES_MAX)
    try:
        with Producer(bootstrap) as producer:
            for partition in range(partitions):  # open every partition leader's stream first
                producer.send_batch(topic, partition, full[:1]).result()
            answers.put(("ready", None))
            while commands.get() == "run":
                answers.put(("result", _produce_window(producer, topic, partitions, full, commands)))
    except Exception as exc:  # reported to the parent
        answers.put(("error", f"{type(exc).__name__}: {exc}"))


def _produce_window(producer: Producer, topic: str, partitions: int, full: list[bytes], commands) -> tuple:
    window = threading.BoundedSemaphore(settings.BENCH_BATCHES_QUEUED_PER_PARTITION * partitions)
    stop = threading.Event()
    threading.Thread(target=lambda: commands.get() and stop.set(), daemon=True).start()  # "stop" ends the window

    futures = []
    started_s = time.monotonic()
    for partition in itertools.cycle(range(partitions)):
        if stop.is_set():
            break
        if not window.acquire(timeout=0.05):
            continue
        future = producer.send_batch(topic, partition, full)
        future.add_done_callback(lambda _f: window.release())
        futures.append(future)
    producer.flush()
    for future in futures:
        future.result()
    return len(futures) * len(full), time.monotonic() - started_s


class LightLoad:
    """Single-record sends (linger 0) and single fetches, each at BENCH_KV_LIGHT_LOAD_RATE_PER_S from a thread of
    this process; each latency (send to acknowledgement; fetch of the last acknowledged record, to its answer after
    the ReadIndex confirmation) goes to the window it started in."""

    def __init__(self, bootstrap: str, topic: str, record_bytes: int):
        self.producer = Producer(bootstrap, linger_ms=0)
        self.reader = Reader(bootstrap)
        self.topic = topic
        self.value = os.urandom(record_bytes)
        first = self.producer.send(topic, self.value).result()
        self.last = (first.partition, first.offset)  # the last acknowledged record, which the fetches read
        self.sends: list[float] | None = None
        self.fetches: list[float] | None = None
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._paced, args=(call,), daemon=True)
                        for call in (self._send, self._fetch)]
        for thread in self.threads:
            thread.start()

    def _paced(self, call) -> None:
        interval_s = 1 / settings.BENCH_KV_LIGHT_LOAD_RATE_PER_S
        next_s = time.perf_counter()
        while not self.stopping.is_set():
            call()
            next_s += interval_s
            self.stopping.wait(max(0.0, next_s - time.perf_counter()))

    def _send(self) -> None:
        window = self.sends
        if window is None:
            return
        sent = time.perf_counter()
        future = self.producer.send(self.topic, self.value)

        def acknowledged(done, s=sent, w=window) -> None:
            w.append((time.perf_counter() - s) * 1000)
            if done.exception() is None:
                self.last = (done.result().partition, done.result().offset)
        future.add_done_callback(acknowledged)

    def _fetch(self) -> None:
        window = self.fetches
        if window is None:
            return
        partition, offset = self.last
        started = time.perf_counter()
        self.reader.fetch(self.topic, partition, offset)
        window.append((time.perf_counter() - started) * 1000)

    def start(self) -> None:
        self.sends, self.fetches = [], []

    def stop(self) -> tuple[list[float], list[float]]:
        sends, fetches, self.sends, self.fetches = self.sends, self.fetches, None, None
        self.producer.flush()
        return list(sends or []), list(fetches or [])

    def close(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(5)
        self.producer.close()
        self.reader.close()


class Producers:
    """`count` produce_until processes, each window started and stopped together."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, record_bytes: int, count: int):
        ctx = multiprocessing.get_context("spawn")
        self.commands = [ctx.Queue() for _ in range(count)]
        self.answers = ctx.Queue()
        self.procs = [ctx.Process(target=produce_until, args=(bootstrap, topic, partitions, record_bytes, c,
                                                              self.answers), daemon=True) for c in self.commands]
        for proc in self.procs:
            proc.start()
        self._collect(settings.BENCH_WORKER_READY_TIMEOUT_MS / 1000)

    def _collect(self, timeout_s: float) -> list:
        out = []
        deadline = time.monotonic() + timeout_s
        while len(out) < len(self.procs):
            try:
                tag, value = self.answers.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise RequestTimedOut(f"produce processes silent after {timeout_s:g} s") from None
            if tag == "error":
                raise InternalError(f"produce process: {value}")
            out.append(value)
        return out

    def start(self) -> None:
        for commands in self.commands:
            commands.put("run")

    def stop(self) -> dict:
        for commands in self.commands:
            commands.put("stop")
        results = self._collect(settings.BENCH_WORKER_READY_TIMEOUT_MS / 1000)
        records = sum(r[0] for r in results)
        elapsed_s = max(r[1] for r in results)
        return {"records_per_s": records / elapsed_s if elapsed_s else 0.0, "seconds": elapsed_s}

    def window(self, seconds: float) -> dict:
        self.start()
        time.sleep(seconds)
        return self.stop()

    def close(self) -> None:
        for commands in self.commands:
            commands.put("exit")
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()


# ---------------------------------------------------------------------- the workload

def bench_kv(bootstrap: str, args, runner) -> dict:
    stamp = time.time_ns() // 1_000_000
    by_partition = keys_by_partition(args.kv_keys, args.partitions)
    table_figures = _bench_table(bootstrap, f"bench-kv-{stamp}", by_partition, args, runner)
    compaction_figures = _bench_compaction(bootstrap, stamp, by_partition, args, runner)
    return {"bench": "kv", **table_figures, **compaction_figures, "keys": args.kv_keys,
            "record_bytes": args.record_bytes, "partitions": args.partitions,
            "replication_factor": args.replication_factor, "readers": args.readers, "producers": args.producers,
            "measure_ms": settings.BENCH_KV_MEASURE_MS}


def _bench_table(bootstrap: str, topic: str, by_partition: list[list[bytes]], args, runner) -> dict:
    with Admin(bootstrap) as admin:
        admin.create_table(topic, partitions=args.partitions, replication_factor=args.replication_factor)
    runner.wait_for_preferred_leaders(bootstrap, topic, settings.BENCH_PREFERRED_LEADERS_TIMEOUT_MS / 1000)
    runner.progress(f"kv: filling table {topic} with {args.kv_keys} keys of {args.record_bytes} bytes")
    fill_keyed(bootstrap, topic, by_partition, args.kv_keys, args.record_bytes)
    keys = tuple(k for keys in by_partition for k in keys)
    readers = [KvLoad(bootstrap, topic, keys, "get", settings.BENCH_KV_MEASURE_MS, args.record_bytes, seed)
               for seed in range(max(1, args.readers))]
    runner.progress(f"kv: Table.get of random keys, {len(readers)} process(es), {settings.BENCH_KV_MEASURE_MS} ms")
    gets = runner.run_workers(table_load, readers)
    own = [keys[i::max(1, args.producers)][:settings.BENCH_KV_CAS_KEYS] for i in range(max(1, args.producers))]
    writers = [KvLoad(bootstrap, topic, k, "cas", settings.BENCH_KV_MEASURE_MS, args.record_bytes, seed)
               for seed, k in enumerate(own) if k]
    runner.progress(f"kv: Table.put with expected_revision, {len(writers)} process(es), "
                    f"{settings.BENCH_KV_MEASURE_MS} ms")
    puts = runner.run_workers(table_load, writers)
    with Admin(bootstrap) as admin:
        admin.delete_topic(topic)
    get_ms = [ms for r in gets for ms in r["latencies_ms"]]
    put_ms = [ms for r in puts for ms in r["latencies_ms"]]
    return {"gets": len(get_ms), "gets_per_s": round(_rate(gets)),
            "get_p50_ms": runner.rounded_ms(runner.percentile(get_ms, 0.50)),
            "get_p99_ms": runner.rounded_ms(runner.percentile(get_ms, 0.99)),
            "cas_puts": len(put_ms), "cas_puts_per_s": round(_rate(puts)),
            "cas_put_p50_ms": runner.rounded_ms(runner.percentile(put_ms, 0.50)),
            "cas_put_p99_ms": runner.rounded_ms(runner.percentile(put_ms, 0.99))}


def _rate(results: list[dict]) -> float:
    calls = sum(r["records"] for r in results)
    elapsed_s = max(r["finished_s"] for r in results) - min(r["started_s"] for r in results)
    return calls / elapsed_s if elapsed_s > 0 else 0.0


def _compaction_totals(admin: Admin) -> dict[int, tuple[int, int, int, float]]:
    return {s.broker_id: (s.compaction_passes, s.compaction_bytes_scanned, s.compaction_bytes_removed,
                          s.compaction_busy_s) for s in admin.broker_stats()}


def _delta(after: dict, before: dict, field: int) -> float:
    return sum(v[field] - before.get(b, (0, 0, 0, 0.0))[field] for b, v in after.items())


def compact_now(bootstrap: str, topic: str, runner) -> tuple[dict, dict, float]:
    """Set `topic`'s segment_bytes to 1 and wait until the brokers have finished one pass per partition of `topic`
    (nothing else is written to it, so a partition passed once is not due again, and a pass cut short by a leader
    change is not counted: its new leader passes it); segment_bytes goes back up after. (compaction totals before,
    after, seconds from the change)."""
    with Admin(bootstrap) as admin:
        partitions = len(admin.describe_topic(topic).partitions)
        totals = _compaction_totals(admin)
        started_s = time.monotonic()
        admin.alter_topic(topic, segment_bytes=1)
        deadline = started_s + settings.BENCH_KV_COMPACTION_TIMEOUT_MS / 1000
        report_s = started_s + PROGRESS_EVERY_S
        while True:
            now = _compaction_totals(admin)
            if _delta(now, totals, 0) >= partitions:
                break
            if time.monotonic() > deadline:
                raise RequestTimedOut(f"compaction of {topic} not done after "
                                      f"{settings.BENCH_KV_COMPACTION_TIMEOUT_MS} ms")
            if time.monotonic() >= report_s:
                report_s += PROGRESS_EVERY_S
                runner.progress(f"kv: compaction read {_delta(now, totals, 1) / 1e6:.1f} MB after "
                                f"{time.monotonic() - started_s:.1f} s")
            time.sleep(PASS_POLL_S)
        wall_s = time.monotonic() - started_s
        admin.alter_topic(topic, segment_bytes=SEGMENT_BYTES_NEVER)  # no further passes
    return totals, now, wall_s


def _bench_compaction(bootstrap: str, stamp: int, by_partition: list[list[bytes]], args, runner) -> dict:
    """Two compacted topics filled alike: the first compacted beside a light load (how long a pass holds a produce
    up), the second beside the full produce load (what it costs produce throughput)."""
    light_topic, loaded_topic = f"bench-compact-{stamp}-a", f"bench-compact-{stamp}-b"
    load_topic = f"bench-compact-load-{stamp}"
    with Admin(bootstrap) as admin:
        for name in (light_topic, loaded_topic):
            admin.create_table(name, partitions=args.partitions, replication_factor=args.replication_factor,
                               segment_bytes=SEGMENT_BYTES_NEVER)
        admin.create_topic(load_topic, partitions=args.partitions, replication_factor=args.replication_factor)
    for name in (light_topic, loaded_topic, load_topic):
        runner.wait_for_preferred_leaders(bootstrap, name, settings.BENCH_PREFERRED_LEADERS_TIMEOUT_MS / 1000)
    for name in (light_topic, loaded_topic):
        runner.progress(f"kv: writing {args.compaction_records} records over {args.kv_keys} keys to {name}")
        fill_keyed(bootstrap, name, by_partition, args.compaction_records, args.record_bytes)
    window_s = settings.BENCH_KV_MEASURE_MS / 1000
    light = LightLoad(bootstrap, load_topic, args.record_bytes)
    try:
        runner.progress(f"kv: {settings.BENCH_KV_LIGHT_LOAD_RATE_PER_S} single-record sends/s and fetches/s for {window_s:g} s, "
                        f"then while {light_topic} is compacted")
        light.start()
        time.sleep(window_s)
        quiet_ms, quiet_fetch_ms = light.stop()
        light.start()
        light_before, light_after, _ = compact_now(bootstrap, light_topic, runner)
        compacting_ms, compacting_fetch_ms = light.stop()
    finally:
        light.close()
    producers = Producers(bootstrap, load_topic, args.partitions, args.record_bytes, max(1, args.producers))
    try:
        runner.progress(f"kv: full produce load for {window_s:g} s, while {loaded_topic} is compacted, "
                        f"{window_s:g} s more")
        before = producers.window(window_s)
        producers.start()
        try:
            loaded_before, loaded_after, wall_s = compact_now(bootstrap, loaded_topic, runner)
        finally:
            during = producers.stop()
        after = producers.window(window_s)
    finally:
        producers.close()
    with Admin(bootstrap) as admin:
        for name in (light_topic, loaded_topic, load_topic):
            admin.delete_topic(name)
    scanned = _delta(light_after, light_before, 1) + _delta(loaded_after, loaded_before, 1)
    removed = _delta(light_after, light_before, 2) + _delta(loaded_after, loaded_before, 2)
    busy_s = _delta(light_after, light_before, 3) + _delta(loaded_after, loaded_before, 3)
    without = (before["records_per_s"] + after["records_per_s"]) / 2
    ms = runner.rounded_ms
    return {"compaction_records": args.compaction_records,
            "compaction_mb_per_s": round(scanned / 1e6 / busy_s, 2) if busy_s > 0 else None,
            "compaction_scanned_mb": round(scanned / 1e6, 2), "compaction_removed_mb": round(removed / 1e6, 2),
            "compaction_busy_s": round(busy_s, 2), "compaction_wall_s_under_load": round(wall_s, 2),
            "produce_records_per_s_without_compaction": round(without),
            "produce_records_per_s_during_compaction": round(during["records_per_s"]),
            "produce_during_compaction_ratio": round(during["records_per_s"] / without, 3) if without else None,
            "produce_latency_p50_ms_without_compaction": ms(runner.percentile(quiet_ms, 0.50)),
            "produce_latency_p99_ms_without_compaction": ms(runner.percentile(quiet_ms, 0.99)),
            "produce_latency_max_ms_without_compaction": ms(max(quiet_ms, default=None)),
            "produce_latency_p50_ms_during_compaction": ms(runner.percentile(compacting_ms, 0.50)),
            "produce_latency_p99_ms_during_compaction": ms(runner.percentile(compacting_ms, 0.99)),
            "produce_latency_max_ms_during_compaction": ms(max(compacting_ms, default=None)),
            "fetch_latency_p50_ms_without_compaction": ms(runner.percentile(quiet_fetch_ms, 0.50)),
            "fetch_latency_p99_ms_without_compaction": ms(runner.percentile(quiet_fetch_ms, 0.99)),
            "fetch_latency_p50_ms_during_compaction": ms(runner.percentile(compacting_fetch_ms, 0.50)),
            "fetch_latency_p99_ms_during_compaction": ms(runner.percentile(compacting_fetch_ms, 0.99)),
            "fetch_latency_max_ms_during_compaction": ms(max(compacting_fetch_ms, default=None)),
            "light_load_rate_per_s": settings.BENCH_KV_LIGHT_LOAD_RATE_PER_S}
