"""`raftbus bench produce|consume|scale|queue|aio|kafka|kv|failover|idle|all|spark|http|soak`: figures, one JSON line per benchmark on stdout.

Without --bootstrap the benchmark starts its own cluster (`python -m raftbus.broker dev`) in a temporary data
dir, on loopback ports dev holds for it (--base-port 0), and always stops it by pid afterwards (SIGTERM, then SIGKILL of its process
group); --keep-cluster leaves it running and says where.

produce: `records` records of `record_bytes` random bytes, sent as whole batches (Producer.send_batch, or
Producer.send per record with --per-record) by `producers` processes, each writing every partition.
  records_per_s, mb_per_s      payload over the time from the first send to the last acknowledgement
  batch_latency_p50/p99_ms     per batch, from send to acknowledgement, under that full load
  latency_p50/p99_ms           light load, measured first on the quiet cluster: single-record sends at
                               BENCH_LIGHT_LOAD_RATE_PER_S for BENCH_LIGHT_LOAD_DURATION_MS with linger 0,
                               send to acknowledgement
  light_load_broker_cpu_us_per_record, light_load_producer_cpu_us_per_record
                               CPU (user + system) of every broker (BrokerStats) and of the producing process
                               over that light load, per record
  broker_cpu_us_per_record, producer_cpu_us_per_record
                               the same over the full load (every broker together; every producer process)
consume: fills a topic with `records` records (or reuses one already holding them; `all` reuses the produce
topic) and reads everything from the beginning with `readers` Reader processes; with --group, `readers`
Consumer processes of one consumer group read it, committing per batch, and rebalance times are measured
(see client/bench/groups.py for every figure).
spark: records/s through one Spark Structured Streaming micro-batch, Arrow and tuples (client/bench/spark.py).
queue: see client/bench/queue.py (lease+ack throughput with priority ordering, delayed-delivery lateness).
kv: see client/bench/kv.py (Table.get and compare-and-set puts; compaction MB/s and what it costs produce).
scale: produce and consume at 3, 30 and 300 partitions, produce with 1, 4 and 16 producer processes, and
Producer.send per record, each row bounded (client/bench/scale.py).
soak: an hour (--minutes) of produce, group consume and queue load at half their peaks with a broker killed -9
every --kill-every-minutes, memory, files and latency sampled, history checked (client/bench/soak.py); not part
of `all`; --out and --table-out get its JSON and Markdown.
failover, idle, scale: on fresh clusters of their own, see client/bench/ops.py (kill -9 of a leader to the next
acknowledged produce; broker CPU with 100 idle partitions). `all` runs every workload but spark and http, these
three last, after the cluster it started has stopped (a cluster given with --bootstrap or kept with
--keep-cluster is waited on to go quiet instead).
MB are 10^6 payload bytes (record values). Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import queue
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from boltons.statsutils import Stats

from raftbus.bench import groups as bench_groups
from raftbus.bench import kv as bench_kv
from raftbus.bench import ops as bench_ops
from raftbus.bench import queue as bench_queue
from raftbus.bench import scale as bench_scale
from raftbus.bench import soak as bench_soak
from raftbus.bench import table as bench_table
from raftbus.client import settings
from raftbus.client.admin import Admin
from raftbus.client.errors import InternalError, InvalidArgument, RaftbusError, RequestTimedOut, TopicExists, Unavailable
from raftbus.client.producer import Producer
from raftbus.client.reader import Reader
from raftbus.gateway.settings import BENCH_LIGHT_LOAD_REQUESTS
from raftbus.client.records import RECORD_OVERHEAD_BYTES

WORKLOADS = ("produce", "consume", "scale", "queue", "aio", "kafka", "kv", "failover", "idle", "all", "spark",
             "http", "soak")
FRESH_CLUSTER_WORKLOADS = ("scale", "failover", "idle", "soak")  # each starts clusters of its own
LOOPBACK = "127.0.0.1"


def partition_counts(text: str) -> tuple[int, ...]:
    """`--scale-partitions`: comma-separated partition counts, each at least 1."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected partition counts like 3,300, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"partition counts must be at least 1, got {text!r}")
    return counts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", choices=WORKLOADS)
    parser.add_argument("--bootstrap", default=argparse.SUPPRESS,
                        help="use this cluster instead of starting a local one")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=3, help="brokers of the local cluster")
    parser.add_argument("--producers", type=int, default=2, help="producer processes")
    parser.add_argument("--readers", type=int, default=3, help="reader processes (consume), at most one per partition")
    parser.add_argument("--linger-ms", type=int, default=settings.LINGER_MS)
    parser.add_argument("--batch-bytes-max", type=int, default=settings.BATCH_BYTES_MAX)
    parser.add_argument("--per-record", action="store_true", help="Producer.send per record instead of batches")
    parser.add_argument("--out", help="also write the results to this JSON file")
    parser.add_argument("--table-out", help="also write the figures beside their targets to this Markdown file")
    # consumer groups
    parser.add_argument("--group", action="store_true",
                        help="consume: read with a consumer group, committing per batch, and time rebalances")
    parser.add_argument("--no-decode", dest="decode", action="store_false",
                        help="consume --group: count records from batch headers without decoding them into Records")
    parser.add_argument("--session-timeout-ms", type=int, default=settings.BENCH_GROUP_SESSION_TIMEOUT_MS,
                        help="consume --group: session timeout of the rebalance run's members")
    parser.add_argument("--scale-partitions", type=partition_counts, default=None, metavar="N,N...",
                        help="scale: only the partition rows of these partition counts (no send or producer rows)")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the local cluster running")
    parser.add_argument("--http-light-requests", type=int, default=BENCH_LIGHT_LOAD_REQUESTS,
                        help="http: single-record requests timed one after another at light load")
    parser.add_argument("--secure", action="store_true",
                        help="local cluster with TLS, tokens and ACLs (raftbus dev --secure), used as its admin")
    bench_queue.add_queue_arguments(parser)
    bench_kv.add_kv_arguments(parser)
    bench_ops.add_ops_arguments(parser)
    bench_soak.add_soak_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raftbus bench")
    add_arguments(parser)
    parser.set_defaults(bootstrap=None)
    return parser


def progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- figures

def percentile(values: list[float], fraction: float) -> float | None:
    """The `fraction` quantile (0..1, linear between the nearest ranks, boltons' Stats); None for no values."""
    return Stats(values).get_quantile(fraction) if values else None


def paced(count: int, rate_per_s: int):
    """Yield 0..count-1, each at its scheduled time (`rate_per_s` per second), for blocking senders."""
    started_s = time.perf_counter()
    for i in range(count):
        delay_s = started_s + i / rate_per_s - time.perf_counter()
        if delay_s > 0:
            time.sleep(delay_s)
        yield i


async def paced_async(count: int, rate_per_s: int):
    """`paced` for coroutines: awaits until each is due."""
    started_s = time.perf_counter()
    for i in range(count):
        delay_s = started_s + i / rate_per_s - time.perf_counter()
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        yield i


def split_count(total: int, parts: int) -> list[int]:
    """`total` split into `parts` near-equal counts."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def records_per_batch(record_bytes: int, batch_bytes_max: int) -> int:
    return max(1, batch_bytes_max // (record_bytes + RECORD_OVERHEAD_BYTES))


def rate_figures(records: int, value_bytes: int, elapsed_s: float) -> dict:
    elapsed_s = max(elapsed_s, 1e-9)
    return {"elapsed_s": round(elapsed_s, 3), "records_per_s": round(records / elapsed_s),
            "mb_per_s": round(value_bytes / 1e6 / elapsed_s, 2)}


def rounded_ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


# ---------------------------------------------------------------------- local cluster

class DevCluster:
    """`python -m raftbus.broker dev` in its own process group, started and stopped by pid."""

    def __init__(self, brokers: int, data_dir: Path, secure: bool = False):
        self.brokers = brokers
        self.data_dir = data_dir
        self.secure = secure
        self.bootstrap = ""  # from dev's ready lines
        self.proc: subprocess.Popen | None = None
        self._lines: queue.Queue = queue.Queue()

    def command(self) -> list[str]:
        # --base-port 0: dev holds client and Raft ports the kernel picks, and each broker picks its Kafka port
        # (the kafka workload finds them in the cluster's status); no metrics endpoints
        return [sys.executable, "-m", "raftbus.broker", "dev", "--brokers", str(self.brokers),
                "--data-dir", str(self.data_dir), "--base-port", "0", "--metrics-base-port", "0",
                "--log-level", "WARNING",
                *(["--secure"] if self.secure else [])]

    def start(self) -> str:
        """Start the cluster and wait for its ready line; returns the bootstrap list."""
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, start_new_session=True, text=True)
        threading.Thread(target=self._drain, daemon=True).start()
        self._wait_ready(settings.BENCH_CLUSTER_READY_TIMEOUT_MS / 1000)
        if self.secure:  # this process and its workers connect as the cluster's admin (client/credentials.py)
            os.environ.update(RAFTBUS_TLS_CA=str(self.data_dir / "ca.pem"),
                              RAFTBUS_TOKEN_FILE=str(self.data_dir / "admin.token"))
        return self.bootstrap

    def _drain(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise Unavailable(f"local cluster not ready after {timeout_s:g} s (logs in {self.data_dir})") from None
            if line is None:
                raise Unavailable(f"local cluster exited with {self.proc.wait()} before it was ready "
                                  f"(logs in {self.data_dir})")
            progress(line)
            found = re.search(r"bootstrap (\S+?),? logs", line)
            if found:
                self.bootstrap = found.group(1)
            if "cluster ready" in line:
                return

    def stop(self) -> None:
        """SIGTERM to the dev process (it stops its brokers); SIGKILL to its process group if that takes too long."""
        stop_by_pid(self.proc, settings.BENCH_CLUSTER_STOP_TIMEOUT_MS / 1000)


def stop_by_pid(proc: subprocess.Popen | None, timeout_s: float) -> None:
    """SIGTERM to `proc` (started with start_new_session); SIGKILL to its process group after timeout_s."""
    if proc is None or proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


@contextmanager
def cluster_for(args) -> Iterator[str]:
    """The bootstrap to benchmark: --bootstrap as given, else a local cluster stopped on the way out."""
    if args.bootstrap:
        yield args.bootstrap
        return
    data_dir = Path(tempfile.mkdtemp(prefix="raftbus-bench-"))
    cluster = DevCluster(args.brokers, data_dir, secure=getattr(args, "secure", False))
    progress(f"starting {args.brokers} local brokers in {data_dir}")
    try:
        yield cluster.start()
    finally:
        if args.keep_cluster and cluster.proc is not None:
            progress(f"cluster left running: pid {cluster.proc.pid}, bootstrap {cluster.bootstrap}, data {data_dir}")
        else:
            cluster.stop()
            shutil.rmtree(data_dir, ignore_errors=True)


# ---------------------------------------------------------------------- worker processes

@dataclass(frozen=True)
class WorkerSpec:
    """What one load process does: write `records` to, or read `partitions` of, `topic`."""

    bootstrap: str
    topic: str
    partitions: tuple[int, ...]
    records: int = 0
    record_bytes: int = 100
    linger_ms: int = settings.LINGER_MS
    batch_bytes_max: int = settings.BATCH_BYTES_MAX
    per_record: bool = False
    batch_records_max: int = 0  # send_batch: records per batch at most (0: as many as batch_bytes_max holds)


Ready = Callable[[], None]


def worker_main(run: Callable[[WorkerSpec, Ready], dict], spec: WorkerSpec, results, start_event) -> None:
    """Entry of a load process: warm up, say ready, wait for the start signal, run, report."""
    def ready() -> None:
        results.put(("ready", None))
        if not start_event.wait(settings.BENCH_WORKER_READY_TIMEOUT_MS / 1000):
            raise RequestTimedOut("the start signal never came")

    try:
        results.put(("result", run(spec, ready)))
    except RaftbusError as err:
        results.put(("error", err))
    except Exception as exc:  # reported to the parent as a typed error
        results.put(("error", InternalError(f"{type(exc).__name__}: {exc}")))


def _collect(results, procs, kind: str, timeout_s: float | None) -> list:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    collected = []
    while len(collected) < len(procs):
        try:
            tag, value = results.get(timeout=1.0)
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise InternalError(f"load process pid {dead[0].pid} exited with {dead[0].exitcode}") from None
            if deadline is not None and time.monotonic() > deadline:
                raise RequestTimedOut(f"load processes not {kind} after {timeout_s:g} s") from None
            continue
        if tag == "error":
            raise value
        collected.append(value)
    return collected


def run_workers(run: Callable[[WorkerSpec, Ready], dict], specs: list[WorkerSpec]) -> list[dict]:
    """Run `run` once per spec: in this process for one spec, else in spawned processes started together."""
    if len(specs) == 1:
        return [run(specs[0], lambda: None)]
    ctx = multiprocessing.get_context("spawn")
    results, start_event = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=worker_main, args=(run, spec, results, start_event), daemon=True) for spec in specs]
    for proc in procs:
        proc.start()
    try:
        _collect(results, procs, "ready", settings.BENCH_WORKER_READY_TIMEOUT_MS / 1000)
        start_event.set()
        return _collect(results, procs, "done", None)
    except BaseException:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        raise
    finally:
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()


def send_batches(producer: Producer, spec: WorkerSpec) -> list[float]:
    """Send spec.records as whole batches round-robin over the partitions; returns per-batch latencies in ms.

    At most BENCH_BATCHES_QUEUED_PER_PARTITION batches per partition are unacknowledged at a time, so a
    batch's latency is its own trip plus the wait behind the one in flight, not the depth of a deep queue.
    """
    value = os.urandom(spec.record_bytes)
    per_batch = records_per_batch(spec.record_bytes, spec.batch_bytes_max)
    if spec.batch_records_max:
        per_batch = min(per_batch, spec.batch_records_max)
    full = [value] * per_batch
    window = threading.BoundedSemaphore(settings.BENCH_BATCHES_QUEUED_PER_PARTITION * len(spec.partitions))
    latencies_ms: list[float] = []
    futures = []
    sent = 0

    def acknowledged(_future, started_s: float) -> None:
        latencies_ms.append((time.perf_counter() - started_s) * 1000)
        window.release()

    for partition in itertools.cycle(spec.partitions):
        if sent >= spec.records:
            break
        count = min(per_batch, spec.records - sent)
        window.acquire()
        started_s = time.perf_counter()
        future = producer.send_batch(spec.topic, partition, full if count == per_batch else full[:count])
        future.add_done_callback(lambda f, s=started_s: acknowledged(f, s))
        futures.append(future)
        sent += count
    producer.flush()
    for future in futures:
        future.result()
    return latencies_ms


def send_records(producer: Producer, spec: WorkerSpec) -> list[float]:
    """Send spec.records one Producer.send at a time (keyless, so batching follows linger and size)."""
    value = os.urandom(spec.record_bytes)
    futures = [producer.send(spec.topic, value) for _ in range(spec.records)]
    producer.flush()
    for future in futures:
        future.result()
    return []


def process_cpu_s() -> float:
    """CPU time (user + system) of this process, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def produce_load(spec: WorkerSpec, ready: Ready) -> dict:
    with Producer(spec.bootstrap, linger_ms=spec.linger_ms, batch_bytes_max=spec.batch_bytes_max) as producer:
        ready()
        started_s, cpu_started_s = time.monotonic(), process_cpu_s()
        latencies_ms = send_records(producer, spec) if spec.per_record else send_batches(producer, spec)
        finished_s, cpu_s = time.monotonic(), process_cpu_s() - cpu_started_s
    return {"records": spec.records, "value_bytes": spec.records * spec.record_bytes, "started_s": started_s,
            "finished_s": finished_s, "latencies_ms": latencies_ms, "cpu_s": cpu_s}


def consume_load(spec: WorkerSpec, ready: Ready) -> dict:
    records = value_bytes = 0
    with Reader(spec.bootstrap) as reader:
        reader.partitions(spec.topic)
        ready()
        started_s = time.monotonic()
        for record in reader.iter_topic(spec.topic, from_beginning=True, stop_at_end=True,
                                        partitions=spec.partitions):
            records += 1
            value_bytes += len(record.value or b"")
        finished_s = time.monotonic()
    return {"records": records, "value_bytes": value_bytes, "started_s": started_s, "finished_s": finished_s}


def combined(results: list[dict]) -> tuple[int, int, float]:
    """(records, value bytes, elapsed seconds from the first start to the last finish) over all processes."""
    elapsed_s = max(r["finished_s"] for r in results) - min(r["started_s"] for r in results)
    return sum(r["records"] for r in results), sum(r["value_bytes"] for r in results), elapsed_s


# ---------------------------------------------------------------------- workloads

def ensure_topic(bootstrap: str, topic: str, args) -> int:
    """Create `topic` unless it exists; returns the number of brokers in the cluster."""
    with Admin(bootstrap) as admin:
        try:
            admin.create_topic(topic, partitions=args.partitions, replication_factor=args.replication_factor)
        except TopicExists:
            progress(f"reusing topic {topic}")
        return len(admin.cluster_status().brokers)


def wait_for_preferred_leaders(bootstrap: str, topic: str, timeout_s: float) -> bool:
    """Wait until each partition is led by its preferred replica (brokers hand leadership over a few seconds
    after a topic is created), so a latency measurement does not include those hand-overs; False on timeout."""
    deadline = time.monotonic() + timeout_s
    with Admin(bootstrap) as admin:
        while time.monotonic() < deadline:
            partitions = admin.describe_topic(topic).partitions
            if all(p.leader_id == p.replicas[0] for p in partitions):
                return True
            time.sleep(0.2)
    return False


def load_specs(bootstrap: str, topic: str, records: int, args) -> list[WorkerSpec]:
    partitions = tuple(range(args.partitions))
    return [WorkerSpec(bootstrap, topic, partitions, count, args.record_bytes, args.linger_ms, args.batch_bytes_max,
                       args.per_record) for count in split_count(records, max(1, args.producers)) if count]


def light_load_latencies_ms(bootstrap: str, topic: str, record_bytes: int, cpu: dict | None = None) -> list[float]:
    """Single-record sends at a fixed rate with linger 0; latency of each from send to acknowledgement. With
    `cpu`, the CPU seconds the brokers (BrokerStats) and this process spent from the first measured send to the
    last acknowledgement go in it as "brokers_s" and "producer_s"."""
    rate_per_s = settings.BENCH_LIGHT_LOAD_RATE_PER_S
    count = rate_per_s * settings.BENCH_LIGHT_LOAD_DURATION_MS // 1000
    value = os.urandom(record_bytes)
    latencies_ms: list[float] = []
    futures = []
    with Producer(bootstrap, linger_ms=0) as producer:
        with Admin(bootstrap) as admin:
            partitions = len(admin.describe_topic(topic).partitions)
        for partition in range(partitions):  # open every partition leader's stream before measuring
            producer.send(topic, value, partition=partition).result()
        with Admin(bootstrap) as admin:
            brokers_before, producer_before = sum(bench_ops.cpu_seconds(admin).values()), process_cpu_s()
        for _ in paced(count, rate_per_s):
            sent = time.perf_counter()
            future = producer.send(topic, value)
            future.add_done_callback(lambda _f, s=sent: latencies_ms.append((time.perf_counter() - s) * 1000))
            futures.append(future)
        producer.flush()
        for future in futures:
            future.result()
        if cpu is not None:
            producer_s = process_cpu_s() - producer_before
            with Admin(bootstrap) as admin:
                cpu["brokers_s"] = sum(bench_ops.cpu_seconds(admin).values()) - brokers_before
            cpu["producer_s"] = producer_s
    return latencies_ms


def bench_produce(bootstrap: str, args) -> dict:
    topic = f"bench-produce-{time.time_ns() // 1_000_000}"
    latency_topic = f"{topic}-latency"
    ensure_topic(bootstrap, latency_topic, args)
    if not wait_for_preferred_leaders(bootstrap, latency_topic, settings.BENCH_PREFERRED_LEADERS_TIMEOUT_MS / 1000):
        progress("leaders of the latency topic did not settle on their preferred replicas; measuring anyway")
    progress(f"light load: {settings.BENCH_LIGHT_LOAD_RATE_PER_S} single-record sends/s "
             f"for {settings.BENCH_LIGHT_LOAD_DURATION_MS} ms")
    light_cpu: dict = {}
    latencies_ms = light_load_latencies_ms(bootstrap, latency_topic, args.record_bytes, light_cpu)
    brokers = ensure_topic(bootstrap, topic, args)
    progress(f"producing {args.records} records of {args.record_bytes} bytes to {topic} "
             f"with {args.producers} producer process(es)")
    results, broker_cpu_s = bench_ops.with_brokers_cpu(
        bootstrap, lambda: run_workers(produce_load, load_specs(bootstrap, topic, args.records, args)))
    records, value_bytes, elapsed_s = combined(results)
    batch_latencies_ms = [ms for r in results for ms in r["latencies_ms"]]
    cpu_us_per_record = sum(r["cpu_s"] for r in results) * 1e6 / max(1, records)
    return {"bench": "produce", **broker_figures(bootstrap), "records": records, "record_bytes": args.record_bytes,
            **rate_figures(records, value_bytes, elapsed_s),
            "producer_cpu_us_per_record": round(cpu_us_per_record, 2),
            "broker_cpu_us_per_record": round(broker_cpu_s * 1e6 / max(1, records), 2),
            "latency_p50_ms": rounded_ms(percentile(latencies_ms, 0.50)),
            "latency_p99_ms": rounded_ms(percentile(latencies_ms, 0.99)),
            "light_load_broker_cpu_us_per_record": round(light_cpu["brokers_s"] * 1e6 / max(1, len(latencies_ms)), 1),
            "light_load_producer_cpu_us_per_record": round(light_cpu["producer_s"] * 1e6 / max(1, len(latencies_ms)),
                                                           1),
            "batch_latency_p50_ms": rounded_ms(percentile(batch_latencies_ms, 0.50)),
            "batch_latency_p99_ms": rounded_ms(percentile(batch_latencies_ms, 0.99)),
            "light_load_rate_per_s": settings.BENCH_LIGHT_LOAD_RATE_PER_S, "light_load_records": len(latencies_ms),
            "brokers": brokers, "partitions": args.partitions, "replication_factor": args.replication_factor,
            "producers": args.producers, "per_record": args.per_record, "linger_ms": args.linger_ms,
            "batch_bytes_max": args.batch_bytes_max, "topic": topic}


def broker_figures(bootstrap: str) -> dict:
    """Largest broker RSS and the brokers' group-commit durability window (how long an acknowledged record
    lived only in page caches before its fsync), from every broker's BrokerStats after the load."""
    with Admin(bootstrap) as admin:
        stats = admin.broker_stats()
    if not stats:
        return {}
    return {"broker_rss_mb_max": round(max(s.rss_bytes for s in stats) / 1e6, 1),
            "durability_window_p99_ms": max(s.durability_window_p99_ms for s in stats),
            "durability_window_max_ms": max(s.durability_window_max_ms for s in stats)}


def fill_topic(bootstrap: str, topic: str, args) -> int:
    """Make `topic` hold at least args.records records; returns the number of brokers."""
    brokers = ensure_topic(bootstrap, topic, args)
    with Reader(bootstrap) as reader:
        held = sum(hw - start for start, hw in (reader.offsets(topic, p) for p in range(args.partitions)))
    if held < args.records:
        progress(f"filling {topic} with {args.records - held} records")
        run_workers(produce_load, load_specs(bootstrap, topic, args.records - held, args))
    return brokers


def bench_consume(bootstrap: str, args, topic: str | None = None) -> dict:
    topic = topic or f"bench-consume-{args.records}x{args.record_bytes}-p{args.partitions}"
    brokers = fill_topic(bootstrap, topic, args)
    readers = max(1, min(args.readers, args.partitions))
    shares = [tuple(range(args.partitions))[i::readers] for i in range(readers)]
    progress(f"reading {topic} from the beginning with {readers} reader process(es)")
    results = run_workers(consume_load, [WorkerSpec(bootstrap, topic, share) for share in shares])
    records, value_bytes, elapsed_s = combined(results)
    return {"bench": "consume", "records": records, "record_bytes": args.record_bytes,
            **rate_figures(records, value_bytes, elapsed_s), "brokers": brokers, "partitions": args.partitions,
            "replication_factor": args.replication_factor, "readers": readers, "topic": topic}


def bench_group_consume(bootstrap: str, args, topic: str | None = None) -> dict:
    """Consumer groups: see client/bench/groups.py."""
    topic = topic or f"bench-consume-{args.records}x{args.record_bytes}-p{args.partitions}"
    brokers = fill_topic(bootstrap, topic, args)
    progress(f"reading {topic} with a consumer group of {max(1, min(args.readers, args.partitions))} process(es), "
             "committing per batch; then timing rebalances")
    return bench_groups.bench_group_consume(bootstrap, args, topic, brokers, run_workers, rate_figures)


def run_workloads(bootstrap: str, args) -> list[dict]:
    results = []
    if args.workload in ("produce", "all"):
        results.append(emit(bench_produce(bootstrap, args)))
    if args.workload in ("consume", "all"):
        reuse = results[0]["topic"] if results else None
        consume = bench_group_consume if args.group else bench_consume
        results.append(emit(consume(bootstrap, args, reuse)))
    if args.workload == "all" and not args.group:  # consumer groups: `all` covers the group figures too
        results.append(emit(bench_group_consume(bootstrap, args, results[0]["topic"])))
    if args.workload in ("queue", "all"):
        results.append(emit(bench_queue.bench_queue(bootstrap, args, run_workers, WorkerSpec, percentile, rounded_ms,
                                                    progress)))
    if args.workload in ("kafka", "all"):  # the Kafka port through confluent-kafka, see client/bench/kafka.py
        from raftbus.bench.kafka import bench_kafka
        results.append(emit(bench_kafka(bootstrap, args, sys.modules[__name__])))
    if args.workload in ("kv", "all"):  # tables and compaction, see client/bench/kv.py
        results.append(emit(bench_kv.bench_kv(bootstrap, args, sys.modules[__name__])))
    if args.workload in ("aio", "all"):  # the asyncio SDK, see client/bench/aio.py
        from raftbus.bench.aio import bench_aio
        results.append(emit(bench_aio(bootstrap, args, sys.modules[__name__])))
    if args.workload == "spark":  # needs the spark extra (pyspark, pyarrow); see client/bench/spark.py
        from raftbus.bench.spark import bench_spark
        results.append(emit(bench_spark(bootstrap, args, fill_topic, progress)))
    if args.workload == "http":  # through a `raftbus http` gateway process (the http extra): client/bench/http.py
        from raftbus.bench.http import bench_http
        results.append(emit(bench_http(bootstrap, args, progress)))
    return results


def run_benchmarks(args) -> list[dict]:
    """Every workload args.workload names: those on the benchmarked cluster first (a local one started here unless
    --bootstrap), then those on fresh clusters of their own, once a cluster started here has stopped."""
    results = []
    if args.workload not in FRESH_CLUSTER_WORKLOADS:
        with cluster_for(args) as bootstrap:
            results += run_workloads(bootstrap, args)
            if args.workload == "all" and (args.bootstrap or args.keep_cluster):
                settle_before_fresh_clusters(bootstrap)
    return results + run_fresh_cluster_workloads(args)


def run_fresh_cluster_workloads(args) -> list[dict]:
    """The workloads that start clusters of their own (whatever --bootstrap says)."""
    results = []
    if args.workload in ("scale", "all"):  # see client/bench/scale.py
        results.append(emit(bench_scale.bench_scale(args, sys.modules[__name__])))
    if args.workload in ("failover", "all"):  # it kills brokers
        results.append(emit(bench_ops.bench_failover(args, percentile, progress)))
    if args.workload in ("idle", "all"):  # a quiet cluster
        results.append(emit(bench_ops.bench_idle(args, progress)))
    return results


def settle_before_fresh_clusters(bootstrap: str) -> None:
    """Wait (at most BENCH_IDLE_SETTLE_MS) until every group of a workloads' cluster that stays up (--bootstrap or
    --keep-cluster) has quiesced: right after the produce, consume, queue and asyncio loads its brokers still
    replicate, apply, fsync and heartbeat, and on two cores that CPU would be taken from the rows measured next on
    fresh clusters. (A cluster the benchmark started is stopped before those rows instead: a quiesced cluster
    still wakes when its queue leases come due, 60 s after the queue workload leased them.)"""
    progress("waiting for the workloads' cluster to go quiet before the fresh-cluster workloads")
    with Admin(bootstrap) as admin:
        settled_s = bench_ops.wait_quiesced(admin, settings.BENCH_IDLE_SETTLE_MS / 1000)
    progress(f"quiet after {settled_s:.1f} s" if settled_s is not None
             else f"not quiet after {settings.BENCH_IDLE_SETTLE_MS} ms; measuring anyway")


def emit(result: dict) -> dict:
    print(json.dumps(result), flush=True)
    return result


def check_args(args) -> None:
    for name in ("records", "record_bytes", "partitions", "replication_factor", "brokers", "producers", "readers",
                 "batch_bytes_max", "session_timeout_ms", "messages", "consumers", "lease_batch", "kv_keys",
                 "compaction_records"):
        if getattr(args, name) < 1:
            raise InvalidArgument(f"--{name.replace('_', '-')} must be >= 1")
    if args.linger_ms < 0:
        raise InvalidArgument("--linger-ms must be >= 0")
    if args.failover_rounds < 1 or args.idle_partitions < 1 or args.idle_seconds <= 0:
        raise InvalidArgument("--failover-rounds and --idle-partitions must be >= 1, --idle-seconds > 0")


def main(args: argparse.Namespace | list[str] | None = None) -> int:
    """Run the benchmark named by args.workload; `args` is the parsed `raftbus bench` namespace or an argv list."""
    if args is None or isinstance(args, list):
        args = build_parser().parse_args(args)
    check_args(args)
    if args.workload == "soak":
        return run_soak(args)
    loop_ms_before = reference_loop_ms()
    results = run_benchmarks(args)
    loop_ms_after = reference_loop_ms()
    results.append(emit({"bench": "machine", "reference_loop_ms_before": loop_ms_before,
                         "reference_loop_ms_after": loop_ms_after,
                         "reference_loop_iterations": settings.BENCH_REFERENCE_LOOP_ITERATIONS}))
    by_bench = {r["bench"]: r for r in results}
    if args.out:
        Path(args.out).write_text(json.dumps(by_bench, indent=2) + "\n")
        progress(f"results written to {args.out}")
    if args.table_out:
        command = "raftbus bench " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["bench"] else [args.workload])
        table = bench_table.markdown(by_bench, machine_description(loop_ms_before, loop_ms_after), command)
        Path(args.table_out).write_text(table)
        print(table, file=sys.stderr, flush=True)
        progress(f"table written to {args.table_out}")
    return 0


def run_soak(args) -> int:
    """`raftbus bench soak`: its summary as one JSON line, its report to --out (JSON) and --table-out (Markdown)."""
    result = bench_soak.bench_soak(args, bench_ops.fresh_cluster, progress)
    result["machine"] = machine_description()
    emit({k: v for k, v in result.items() if k != "intervals"})
    bench_soak.write_outputs(result, args, progress)
    return 0


def reference_loop_ms() -> float:
    """How long this machine takes for BENCH_REFERENCE_LOOP_ITERATIONS additions in a pure-Python loop: a shared VM
    runs at different speeds at different times, so a table says how fast the machine was while its figures were
    taken."""
    started, total = time.perf_counter(), 0
    for i in range(settings.BENCH_REFERENCE_LOOP_ITERATIONS):
        total += i
    return round((time.perf_counter() - started) * 1000, 1)


def machine_description(loop_ms_before: float | None = None, loop_ms_after: float | None = None) -> str:
    """Cores, CPU model, Python, the load average when the figures were taken and the reference loop's time."""
    from raftbus.bench.peers.report import machine_figures

    m = machine_figures()
    speed = ""
    if loop_ms_before is not None and loop_ms_after is not None:
        speed = (f", reference loop ({settings.BENCH_REFERENCE_LOOP_ITERATIONS:,} Python additions) "
                 f"{loop_ms_before:,.0f} ms before the run and {loop_ms_after:,.0f} ms after")
    return (f"{m['cores']} cores ({m['cpu_model']}), Python {m['python']}, {m['os']}, "
            f"1-minute load average {m['load_average_1m_at_start']} at the end{speed}")
