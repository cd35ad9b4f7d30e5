"""`raftbus bench soak`: mixed load for a long time on a fresh cluster, with a broker killed -9 and restarted every
`--kill-every-minutes`; does memory, open files, file sizes or latency drift, is anything lost?

On a fresh cluster of `--brokers` broker processes (started and stopped by pid), three load processes run side by
side until `--minutes` have passed:
  produce  Producer.send_batch of BENCH_SOAK_BATCH_RECORDS records of `--record-bytes` bytes, round-robin over the
           3 partitions of a stream topic whose `--retention-bytes` per partition bounds its data, paced at
           `--produce-rate-per-s` records/s; latency: send_batch to acknowledgement (majority commit);
  group    `--group-members` Consumer processes of one group (one per partition by default) read that topic from
           the beginning, decoding every record and committing after every poll; latency: the record's
           timestamp to its arrival in a poll;
  queue    a Producer enqueues `--queue-rate-per-s` messages/s (send per message) into a 3-partition queue topic;
           a QueueConsumer with default settings leases them and acks each one (acked messages leave the queue,
           so its data is bounded too); latency: the message's timestamp to its ack's answer.
With a rate of 0 the peak is measured first, on topics of their own, for `--peak-seconds` with every load
unpaced: side by side as the soak runs them (`--peaks together`, the default; a rate half of that leaves the
machine room to drain what a kill holds up), or each load alone (`--peaks alone`); half of it
is used. Every `--sample-seconds` each broker process is sampled: anonymous memory (RssAnon of
/proc/PID/status), file-backed memory (RssFile) and, within it, the pages of LMDB maps (the Rss of the `.mdb`
mappings in /proc/PID/smaps), open files (/proc/PID/fd), the LMDB files' sizes and the sizes of the Raft
directories (journals and snapshots) under its data dir, and the Raft log its groups hold in memory (BrokerStats `raft_log_bytes`, at the same
instant: `anon_beside_log_mb` is the anonymous memory less that log, the least sample of an interval where the
others keep the largest: a compacted log's pages count as anonymous until the next heap trim). Every `--kill-every-minutes` one broker
(in turn) is killed -9 and restarted on its data dir BENCH_SOAK_RESTART_DELAY_MS later.

At the end the producer stops, the group consumer reads up to the high watermarks and the queue consumer acks what
is left, each for as long as it makes progress and BENCH_SOAK_DRAIN_TIMEOUT_MS past its last (`DrainBound`: a
backlog left by rates the machine could not keep up with is drained, not counted as lost), then the history is
checked: every acknowledged record must have been read back by the group at the offset it was acknowledged with,
holding the id it was sent with (`lost.produce`), and every acknowledged enqueue acked by the queue consumer
(`lost.queue`, with `queue.acked_twice` and deliveries per message).

Figures per report interval (`--report-seconds`, a minute): each load's count and latency p50/p99, each broker's
largest samples. Verdicts: `growth`: per figure and broker, the largest sample of the last `--growth-window-minutes`
against the largest of as long before the first kill (the baseline, "the 10-minute mark"), target at most
BENCH_SOAK_GROWTH_PERCENT_MAX %: memory and journals saw-tooth (freed heap pages until the next trim, journals until
compaction, snapshots written beside the old ones), so one interval's sample against another's measures where each tooth
fell; the report also gives that point comparison (the last interval against the one ending at the first kill,
`max_point_percent`). `p99_ratio`: each
load's latency p99 over each kill period after the first against the first (target at most
BENCH_SOAK_P99_RATIO_MAX); `lost` must be 0. Written as JSON (`--out`) and Markdown (`--table-out`); `--plot-out`
draws the figures over time to a PNG (needs matplotlib: the `plot` extra).
"""
from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import queue
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from raftbus.client import settings
from raftbus.client.admin import Admin
from raftbus.client.consumer import Consumer
from raftbus.client.errors import InvalidArgument, RaftbusError
from raftbus.client.producer import Producer
from raftbus.client.queues.consumer import QueueConsumer
from raftbus.client.queues.ids import SEQ_MASK
from raftbus.client.reader import Reader
from raftbus.client.wire import raftbus_pb2 as pb

STREAM_TOPIC, QUEUE_TOPIC, GROUP, PEAK_GROUP = "soak-stream", "soak-queue", "soak-group", "soak-peak-group"
PARTITIONS = 3
RECORD_ID = struct.Struct(">Q")
LOADS = ("produce", "group", "queue")
# A compacted log's memory stays anonymous until the next heap trim (broker/heap.py, up to malloc_trim_interval_ms):
# the minute's least sample of the memory beside the log is the one without freed, untrimmed log in it.
LEAST_KEPT = ("anon_beside_log_mb",)
# The peak run's loads send their figures this often, which it does not use: a load still draining is seen alive.
PEAK_REPORT_S = 10.0
BROKER_FIGURES = ("anon_mb", "file_mb", "lmdb_mapped_mb", "open_files", "lmdb_mb", "journal_mb", "raft_log_mb",
                  "anon_beside_log_mb")


def add_soak_arguments(parser) -> None:
    parser.add_argument("--minutes", type=float, default=settings.BENCH_SOAK_MINUTES, help="soak: how long")
    parser.add_argument("--kill-every-minutes", type=float, default=settings.BENCH_SOAK_KILL_EVERY_MINUTES,
                        help="soak: a broker is killed -9 and restarted this often")
    parser.add_argument("--report-seconds", type=float, default=60.0, help="soak: length of a report interval")
    parser.add_argument("--sample-seconds", type=float, default=settings.BENCH_SOAK_SAMPLE_SECONDS,
                        help="soak: brokers are sampled this often")
    parser.add_argument("--produce-rate-per-s", type=int, default=0,
                        help="soak: records/s produced (0: half the measured peak)")
    parser.add_argument("--queue-rate-per-s", type=int, default=0,
                        help="soak: messages/s enqueued, leased and acked (0: half the measured peak)")
    parser.add_argument("--peak-seconds", type=float, default=settings.BENCH_SOAK_PEAK_SECONDS,
                        help="soak: how long each peak is measured when a rate is 0")
    parser.add_argument("--peaks", choices=("together", "alone"), default="together",
                        help="soak: measure the peaks with the loads side by side (as the soak runs them) or "
                             "each alone")
    parser.add_argument("--retention-bytes", type=int, default=settings.BENCH_SOAK_RETENTION_BYTES,
                        help="soak: retention of the stream topic, bytes per partition")
    parser.add_argument("--growth-window-minutes", type=float, default=settings.BENCH_SOAK_GROWTH_WINDOW_MINUTES,
                        help="soak: growth compares the largest sample of this long before the first kill and at "
                             "the end")
    parser.add_argument("--group-members", type=int, default=PARTITIONS,
                        help="soak: consumer processes of the group reading the stream topic")
    parser.add_argument("--plot-out", help="soak: also draw the figures over time to this PNG (matplotlib)")


def check_soak_args(args) -> None:
    if args.minutes <= 0 or args.kill_every_minutes <= 0 or args.report_seconds <= 0 or args.sample_seconds <= 0:
        raise InvalidArgument("--minutes, --kill-every-minutes, --report-seconds and --sample-seconds must be > 0")
    if args.kill_every_minutes >= args.minutes:
        raise InvalidArgument("--kill-every-minutes must be below --minutes: the first kill period is the baseline")
    if args.growth_window_minutes <= 0:
        raise InvalidArgument("--growth-window-minutes must be > 0")
    if args.produce_rate_per_s < 0 or args.queue_rate_per_s < 0 or args.peak_seconds <= 0:
        raise InvalidArgument("rates must be >= 0 (0: half the peak) and --peak-seconds > 0")
    if not 1 <= args.group_members <= PARTITIONS:
        raise InvalidArgument(f"--group-members must be between 1 and {PARTITIONS}")
    if args.plot_out:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise InvalidArgument("--plot-out needs matplotlib (pip install 'raftbus[plot]')") from None


# ---------------------------------------------------------------------- history accounting (pure)

def add_to_segments(segments: list[list[int]], first_offset: int, count: int, delta: int) -> None:
    """Note `count` records from first_offset whose ids are offset + delta: extends the last segment
    [start, end, delta] when they continue it, else starts one."""
    if segments and segments[-1][1] == first_offset and segments[-1][2] == delta:
        segments[-1][1] += count
    else:
        segments.append([first_offset, first_offset + count, delta])


def missing_records(acked: list[list[int]], read: list[list[int]]) -> int:
    """How many acknowledged records (segments [start, end, id - offset]) were not read back at their offset with
    their id: the part of each acknowledged segment that no read segment of the same delta covers."""
    covered: dict[int, list[tuple[int, int]]] = {}
    for start, end, delta in sorted(read):
        spans = covered.setdefault(delta, [])
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    missing = 0
    for start, end, delta in acked:
        inside = sum(max(0, min(end, e) - max(start, s)) for s, e in covered.get(delta, ()))
        missing += (end - start) - inside
    return missing


class SeqBits:
    """A set of queue message seqs per partition as bits (a long soak enqueues far too many for a set)."""

    def __init__(self):
        self._bits: dict[int, bytearray] = {}

    def add(self, partition: int, seq: int) -> bool:
        """Set the bit; whether it was already set."""
        bits = self._bits.setdefault(partition, bytearray())
        byte, bit = divmod(seq, 8)
        if byte >= len(bits):
            bits.extend(bytes(byte + 1 - len(bits) + 4096))
        was = bool(bits[byte] >> bit & 1)
        bits[byte] |= 1 << bit
        return was

    def missing_from(self, other: "SeqBits") -> int:
        """How many of this set's seqs `other` lacks."""
        missing = 0
        for partition, bits in self._bits.items():
            theirs = other._bits.get(partition, bytearray())
            theirs = theirs + bytes(max(0, len(bits) - len(theirs)))
            missing += sum(bin(mine & ~their & 0xFF).count("1") for mine, their in zip(bits, theirs) if mine)
        return missing


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (position - low), 3)


def _largest(samples: dict, broker: int, figure: str, intervals) -> float | None:
    """The largest sample of `figure` on `broker` over `intervals` (None if none was taken)."""
    values = [samples[(broker, i)][figure] for i in intervals if figure in samples.get((broker, i), {})]
    return max(values) if values else None


def growth_percent(baseline: float | None, last: float | None) -> float | None:
    if baseline is None or last is None or baseline <= 0:
        return None
    return round((last - baseline) / baseline * 100, 2)


# ---------------------------------------------------------------------- load processes

@dataclass(frozen=True)
class LoadSpec:
    bootstrap: str
    load: str
    topic: str
    rate_per_s: int                 # 0: as fast as it goes (peak)
    started_s: float                # monotonic time of the soak's start: intervals count from it
    report_s: float
    record_bytes: int
    group: str = GROUP              # the group load's consumer group


class Intervals:
    """A load's counts and latency samples per report interval, sent to the orchestrator as each one ends."""

    def __init__(self, spec: LoadSpec, results):
        self.spec, self.results = spec, results
        self.lock = threading.Lock()
        self.current = self._index()
        self.count = 0
        self.latencies: list[float] = []
        self.stride = 1
        self.seen = 0

    def _index(self) -> int:
        return int((time.monotonic() - self.spec.started_s) // self.spec.report_s)

    def note(self, count: int, latency_ms: float | None) -> None:
        with self.lock:
            self._roll()
            self.count += count
            if latency_ms is not None:
                self.seen += 1
                if self.seen % self.stride == 0:
                    self.latencies.append(latency_ms)
                    if len(self.latencies) >= settings.BENCH_SOAK_LATENCY_SAMPLES_MAX:
                        self.latencies = self.latencies[::2]  # keep every other sample from now on
                        self.stride *= 2

    def _roll(self) -> None:
        index = self._index()
        if index != self.current:
            self.flush()
            self.current = index

    def flush(self) -> None:
        self.results.put(("interval", self.spec.load, self.current, self.count, self.latencies))
        self.count, self.latencies, self.stride, self.seen = 0, [], 1, 0

    def tick(self) -> None:
        with self.lock:
            self._roll()


class DrainBound:
    """How long a load drains at the end: while it makes progress, and BENCH_SOAK_DRAIN_TIMEOUT_MS past its last
    progress. A machine slower than the rates asked of it leaves a backlog that takes longer than any fixed bound
    to drain; what is still unread or unacked once the drain stops is then what no longer moves."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._done: int | None = None
        self._until = 0.0

    def progressed(self, done: int) -> None:
        """Note how much the load has done so far (records read, messages acked)."""
        if done != self._done:
            self._done = done
            self._until = self._clock() + settings.BENCH_SOAK_DRAIN_TIMEOUT_MS / 1000

    def expired(self) -> bool:
        return self._done is not None and self._clock() > self._until


def load_main(spec: LoadSpec, results, stop, drain) -> None:
    """Entry of a load process: run until `stop` (then drain until `drain` is answered), report at the end."""
    try:
        run = {"produce": produce_load, "group": group_load, "queue": queue_load}[spec.load]
        results.put(("final", spec.load, run(spec, results, stop, drain)))
    except Exception as exc:  # reported to the orchestrator, which fails the run
        results.put(("error", spec.load, f"{type(exc).__name__}: {exc}"))


def _pace(started: float, done: int, rate_per_s: int, stop) -> None:
    if rate_per_s:
        stop.wait(max(0.0, started + done / rate_per_s - time.monotonic()))


def _due(started: float, done: int, rate_per_s: int) -> int:
    """Sends due now to keep `rate_per_s` since `started` (1 when unpaced). A paced loop sends them in one go and
    then sleeps (`_pace`): a thread waking from a sleep waits for the GIL while another thread of its process runs
    (up to the switch interval), and that wait then delays one burst, not every send."""
    if not rate_per_s:
        return 1
    return max(0, int((time.monotonic() - started) * rate_per_s) + 1 - done)


def produce_load(spec: LoadSpec, results, stop, drain) -> dict:
    intervals = Intervals(spec, results)
    pad = bytes(max(0, spec.record_bytes - RECORD_ID.size))
    per_batch = settings.BENCH_SOAK_BATCH_RECORDS
    next_id = [0] * PARTITIONS
    segments: list[list[list[int]]] = [[] for _ in range(PARTITIONS)]
    failed = [0]
    lock = threading.Lock()
    window = threading.BoundedSemaphore(settings.BENCH_BATCHES_QUEUED_PER_PARTITION * PARTITIONS)

    def answered(future, partition: int, first_id: int, sent_s: float) -> None:
        window.release()
        error = future.exception()
        with lock:
            if error is None:
                offset = future.result().offset
                add_to_segments(segments[partition], offset, per_batch, first_id - offset)
            else:
                failed[0] += per_batch
        intervals.note(per_batch if error is None else 0, (time.monotonic() - sent_s) * 1000)

    started, sent = time.monotonic(), 0
    partitions = itertools.cycle(range(PARTITIONS))
    with Producer(spec.bootstrap) as producer:
        while not stop.is_set():
            if not window.acquire(timeout=0.5):
                intervals.tick()
                continue
            partition = next(partitions)
            first_id = next_id[partition]
            next_id[partition] += per_batch
            values = [RECORD_ID.pack(i) + pad for i in range(first_id, first_id + per_batch)]
            sent_s = time.monotonic()
            producer.send_batch(spec.topic, partition, values).add_done_callback(
                lambda f, p=partition, i=first_id, s=sent_s: answered(f, p, i, s))
            sent += per_batch
            _pace(started, sent, spec.rate_per_s, stop)
        producer.flush(settings.BENCH_SOAK_DRAIN_TIMEOUT_MS / 1000)
    intervals.flush()
    with lock:
        acked = sum(end - start for segs in segments for start, end, _ in segs)
        return {"acked": acked, "failed": failed[0], "segments": segments,
                "elapsed_s": time.monotonic() - started}


def group_load(spec: LoadSpec, results, stop, drain) -> dict:
    intervals = Intervals(spec, results)
    segments: list[list[list[int]]] = [[] for _ in range(PARTITIONS)]
    ends = None
    read, bound = 0, DrainBound()
    started = time.monotonic()
    with Consumer(spec.bootstrap, group=spec.group, topics=[spec.topic], auto_offset_reset="earliest") as consumer:
        while True:
            polled = consumer.poll(0.5)
            now_ms, first = time.time_ns() // 1_000_000, None
            for record in polled:
                segs, offset = segments[record.partition], record.offset
                delta = RECORD_ID.unpack_from(record.value)[0] - offset
                if segs and segs[-1][1] == offset and segs[-1][2] == delta:
                    segs[-1][1] = offset + 1
                else:
                    segs.append([offset, offset + 1, delta])
                first = first or record
            if polled:
                consumer.commit_async()
                intervals.note(len(polled), now_ms - first.timestamp_ms)
            else:
                intervals.tick()
            if drain.is_set():
                if ends is None:  # the producer has stopped: read up to where the log ends now
                    with Reader(spec.bootstrap) as reader:
                        ends = [reader.offsets(spec.topic, p)[1] for p in range(PARTITIONS)]
                read += len(polled)
                bound.progressed(read)
                owned = consumer.assignment()
                if all(consumer.position(tp) >= ends[tp.partition] for tp in owned) or bound.expired():
                    break
    intervals.flush()
    return {"read": sum(end - start for segs in segments for start, end, _ in segs), "segments": segments,
            "ends": ends, "elapsed_s": time.monotonic() - started}


def queue_load(spec: LoadSpec, results, stop, drain) -> dict:
    intervals = Intervals(spec, results)
    enqueued, acked = SeqBits(), SeqBits()
    tallies = {"enqueued": 0, "enqueue_failed": 0, "deliveries": 0, "acked": 0, "acked_twice": 0, "ack_errors": 0}
    lock = threading.Lock()
    value = bytes(spec.record_bytes)

    def enqueue_answered(future) -> None:
        error = future.exception()
        with lock:
            if error is None:
                meta = future.result()
                enqueued.add(meta.partition, meta.message_id & SEQ_MASK)
                tallies["enqueued"] += 1
            else:
                tallies["enqueue_failed"] += 1

    def enqueue() -> None:
        started, sent = time.monotonic(), 0
        with Producer(spec.bootstrap, linger_ms=5) as producer:
            while not stop.is_set():
                for _ in range(_due(started, sent, spec.rate_per_s)):
                    producer.send(spec.topic, value).add_done_callback(enqueue_answered)
                    sent += 1
                _pace(started, sent, spec.rate_per_s, stop)
            producer.flush(settings.BENCH_SOAK_DRAIN_TIMEOUT_MS / 1000)

    def ack_answered(future, message) -> None:
        error = future.exception()
        with lock:
            if error is not None:
                tallies["ack_errors"] += 1
                return
            tallies["acked"] += 1
            if acked.add(message.partition, message.message_id & SEQ_MASK):
                tallies["acked_twice"] += 1
        intervals.note(1, time.time_ns() // 1_000_000 - message.timestamp_ms)

    producer_thread = threading.Thread(target=enqueue, name="soak-enqueue", daemon=True)
    producer_thread.start()
    started, bound = time.monotonic(), DrainBound()
    with QueueConsumer(spec.bootstrap, topics=[spec.topic]) as consumer:
        while True:
            messages = consumer.poll(0.5)
            with lock:
                tallies["deliveries"] += len(messages)
            for message in messages:
                message.ack().add_done_callback(lambda f, m=message: ack_answered(f, m))
            intervals.tick()
            if drain.is_set() and not producer_thread.is_alive():
                with lock:
                    acks, done = tallies["acked"], tallies["acked"] >= tallies["enqueued"]
                bound.progressed(acks)
                if done or bound.expired():
                    break
        consumer.flush(settings.BENCH_SOAK_DRAIN_TIMEOUT_MS / 1000)
        lease_counts = consumer.lease_counts()
    intervals.flush()
    with lock:
        return {**tallies, "lost": enqueued.missing_from(acked), "elapsed_s": time.monotonic() - started,
                "lease_counts": {name: getattr(lease_counts, name) for name in lease_counts.__dataclass_fields__}}


# ---------------------------------------------------------------------- broker samples

def broker_sample(pid: int, data_dir: Path) -> dict:
    """One broker process's memory (MB), open files and file sizes (MB) now."""
    status = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("RssAnon", "RssFile", "RssShmem"):
                status[name] = int(rest.split()[0]) * 1024
    lmdb_mapped, current_mdb = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            first = line.split(None, 1)[0]
            if "-" in first and not first.endswith(":"):  # a mapping's header line
                current_mdb = line.rstrip().endswith(".mdb")
            elif current_mdb and first == "Rss:":
                lmdb_mapped += int(line.split()[1]) * 1024
    lmdb = journal = 0
    for path in data_dir.rglob("*"):
        if not path.is_file():
            continue
        size = path.stat().st_size
        if path.suffix == ".mdb":
            lmdb += size
        elif path.parent.name == "raft":
            journal += size
    return {"anon_mb": status.get("RssAnon", 0) / 1e6, "file_mb": status.get("RssFile", 0) / 1e6,
            "lmdb_mapped_mb": lmdb_mapped / 1e6, "open_files": len(os.listdir(f"/proc/{pid}/fd")),
            "lmdb_mb": lmdb / 1e6, "journal_mb": journal / 1e6}


# ---------------------------------------------------------------------- the run

class SoakRun:
    """The orchestrator: the cluster, the load processes, the samples, the kills and what they reported."""

    def __init__(self, cluster, brokers: int, args, progress):
        self.cluster, self.brokers, self.args, self.progress = cluster, brokers, args, progress
        self.ctx = multiprocessing.get_context("spawn")
        self.results = self.ctx.Queue()
        self.intervals: dict[tuple[str, int], tuple[int, list[float]]] = {}
        self.samples: dict[tuple[int, int], dict] = {}  # (broker, interval) -> largest (LEAST_KEPT: least) of each figure
        self.kills: list[dict] = []
        self.finals: dict[str, list[dict]] = {}
        self.heard_from: dict[str, float] = {}  # load -> when it last sent anything (monotonic)
        self.unfinished: list[str] = []
        self._reported = -1
        self._admin: Admin | None = None

    def run_loads(self, rates: dict[str, int], seconds: float) -> float:
        """Run the three loads for `seconds` with kills and samples; returns the soak's start (monotonic)."""
        started = time.monotonic()
        stop, drain = self.ctx.Event(), self.ctx.Event()
        members = {"produce": 1, "group": self.args.group_members, "queue": 1}
        procs = {(load, member): self.ctx.Process(target=load_main, daemon=True, args=(
            LoadSpec(self.cluster.bootstrap, load, QUEUE_TOPIC if load == "queue" else STREAM_TOPIC,
                     rates["queue" if load == "queue" else "produce"], started, self.args.report_seconds,
                     self.args.record_bytes), self.results, stop, drain))
            for load in LOADS for member in range(members[load])}
        for proc in procs.values():
            proc.start()
        try:
            self._steer(started, seconds)
            stop.set()
            self._wait_final({"produce": 1}, procs)
            drain.set()
            self._wait_final({"group": self.args.group_members, "queue": 1}, procs)
        finally:
            for proc in procs.values():
                proc.join(5)
                if proc.is_alive():
                    proc.kill()
        return started

    def _steer(self, started: float, seconds: float) -> None:
        kill_every_s = self.args.kill_every_minutes * 60
        next_sample, next_kill, restart = started, started + kill_every_s, None
        victims = itertools.cycle(range(1, self.brokers + 1))
        while time.monotonic() < started + seconds:
            now = time.monotonic()
            self._take_results(0.2)
            if now >= next_sample:
                index = int((now - started) // self.args.report_seconds)
                self._sample(index)
                next_sample += self.args.sample_seconds
                # an interval is said once the next one has ended too: a load sends an interval's counts with its
                # first note after it (a produce batch's answer, a poll), up to a batch's time later
                done = index - 2
                if done > self._reported:
                    self._reported = done
                    counts = {load: self.intervals.get((load, done), (0, []))[0] for load in LOADS}
                    self.progress(f"soak: interval {done}: {counts}")
            if restart is None and now >= next_kill:
                victim = next(victims)
                self.progress(f"soak: kill -9 of broker {victim} at {now - started:.0f} s")
                self.cluster.kill(victim)
                self.kills.append({"at_s": round(now - started, 1), "broker": victim})
                restart = (now + settings.BENCH_SOAK_RESTART_DELAY_MS / 1000, victim)
                next_kill += kill_every_s
            if restart is not None and now >= restart[0]:
                self.cluster.start(restart[1])
                self.kills[-1]["restarted_at_s"] = round(now - started, 1)
                restart = None
        if restart is not None:
            self.cluster.start(restart[1])

    def _sample(self, interval: int) -> None:
        for node_id in range(1, self.brokers + 1):
            proc = self.cluster.procs.get(node_id)
            if proc is None or proc.poll() is not None:
                continue
            try:
                sample = broker_sample(proc.pid, self.cluster.root / f"broker-{node_id}")
            except (FileNotFoundError, ProcessLookupError):
                continue  # it went away between the check and the read
            log_bytes = self._raft_log_bytes(node_id)
            if log_bytes is not None:  # the anonymous memory beside the Raft logs held in memory, at one instant
                sample["raft_log_mb"] = log_bytes / 1e6
                sample["anon_beside_log_mb"] = sample["anon_mb"] - log_bytes / 1e6
            kept = self.samples.setdefault((node_id, interval), {})
            for name, value in sample.items():
                keep = min if name in LEAST_KEPT else max
                kept[name] = keep(kept.get(name, value), value)

    def _raft_log_bytes(self, node_id: int) -> int | None:
        """The broker's Raft log held in memory (BrokerStats), None when it does not answer within a second."""
        address = self.cluster.bootstrap.split(",")[node_id - 1]
        if self._admin is None:
            self._admin = Admin(self.cluster.bootstrap)
        try:
            stats = self._admin.router.connection(address).admin.BrokerStats(
                pb.BrokerStatsRequest(), timeout=settings.BENCH_SOAK_STATS_TIMEOUT_MS / 1000)
        except grpc.RpcError:
            return None
        return stats.raft_log_bytes

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()

    def _take_results(self, timeout_s: float) -> None:
        try:
            item = self.results.get(timeout=timeout_s)
        except queue.Empty:
            return
        while True:
            kind, load, *rest = item
            self.heard_from[load] = time.monotonic()
            if kind == "error":
                raise RaftbusError(f"soak {load} load failed: {rest[0]}")
            if kind == "final":
                self.finals.setdefault(load, []).append(rest[0])
            else:
                index, count, latencies = rest
                old_count, old_latencies = self.intervals.get((load, index), (0, []))
                self.intervals[(load, index)] = (old_count + count, old_latencies + latencies)
            try:
                item = self.results.get_nowait()
            except queue.Empty:
                return

    def _wait_final(self, loads: dict[str, int], procs) -> None:
        """Until each load's processes reported; one that sends nothing (neither an interval's figures nor its
        final report) for twice the drain bound and a report interval is noted in `unfinished` (the report says its
        history was not checked) instead of failing the whole run. A load still draining sends its figures every
        report interval."""
        bound_s = 2 * settings.BENCH_SOAK_DRAIN_TIMEOUT_MS / 1000 + self.args.report_seconds
        began = time.monotonic()
        while True:
            waiting = [load for load, count in loads.items() if len(self.finals.get(load, ())) < count]
            if not waiting:
                return
            deadline = max([began] + [self.heard_from.get(load, began) for load in waiting]) + bound_s
            dead = [(load, p.exitcode) for (load, _), p in procs.items() if load in waiting
                    and p.exitcode not in (None, 0)]
            if dead:
                raise RaftbusError(f"soak {dead[0][0]} load exited with {dead[0][1]}")
            if time.monotonic() > deadline:
                self.progress(f"soak: {waiting} did not finish within the drain bound")
                self.unfinished += waiting
                return
            self._take_results(0.5)


def measure_peaks(cluster, args, progress) -> dict[str, int]:
    """The loads unpaced for --peak-seconds on the soak's cluster, on topics of their own: records (messages) per
    second of produce and queue. `--peaks together` (the default) runs produce, the group and the queue side by
    side, as the soak does; `--peaks alone` runs produce, then the queue, each by itself."""
    wanted = [load for load, rate_name in (("produce", "produce_rate_per_s"), ("queue", "queue_rate_per_s"))
              if not getattr(args, rate_name)]
    if not wanted:
        return {}
    if args.peaks == "alone":
        return {load: _peak_run(cluster, args, progress, {load: 1})[load] for load in wanted}
    members = {"produce": 1, "group": args.group_members, "queue": 1}
    return {load: rate for load, rate in _peak_run(cluster, args, progress, members).items() if load in wanted}


def _peak_run(cluster, args, progress, members: dict[str, int]) -> dict[str, int]:
    """Run `members` processes of each load unpaced for --peak-seconds; the acknowledged rate of produce and queue
    (a group member stops without a drain: it only adds its load)."""
    progress(f"soak: measuring the peak of {' + '.join(members)} for {args.peak_seconds:g} s")
    ctx = multiprocessing.get_context("spawn")
    results, stop, drain = ctx.Queue(), ctx.Event(), ctx.Event()
    started = time.monotonic()
    procs = {}
    for load, count in members.items():
        topic = f"{QUEUE_TOPIC if load == 'queue' else STREAM_TOPIC}-peak"
        spec = LoadSpec(cluster.bootstrap, load, topic, 0, started, PEAK_REPORT_S, args.record_bytes, group=PEAK_GROUP)
        for member in range(count):
            procs[(load, member)] = ctx.Process(target=load_main, args=(spec, results, stop, drain), daemon=True)
            procs[(load, member)].start()
    try:
        time.sleep(args.peak_seconds)
        stop.set()
        finals: dict[str, dict] = {}
        awaited = {"produce", "queue"} & set(members)
        for load in ("produce", "queue"):  # the producer stops first: the queue's drain waits for its enqueues
            if load in awaited:
                if load == "queue":
                    drain.set()
                while load not in finals:  # results.get raises queue.Empty if the load stops answering
                    kind, name, *rest = results.get(timeout=settings.BENCH_SOAK_DRAIN_TIMEOUT_MS / 1000 + PEAK_REPORT_S)
                    if kind == "error":
                        raise RaftbusError(f"soak {name} peak failed: {rest[0]}")
                    if kind == "final" and name in awaited:
                        finals[name] = rest[0]
    finally:
        stop.set()
        for (load, _), proc in procs.items():
            if load == "group":
                proc.kill()
            proc.join(10)
    return {load: round(final["acked"] / max(final["elapsed_s"], 1e-9)) for load, final in finals.items()}


def report(run: SoakRun, started_rates: dict, peaks: dict, seconds: float, args) -> dict:
    """The soak's figures and verdicts (see the module docstring)."""
    report_s, kill_s = args.report_seconds, args.kill_every_minutes * 60
    count = max(1, int(round(seconds / report_s)))
    intervals = []
    for index in range(count):
        row = {"index": index, "start_s": round(index * report_s, 1)}
        for load in LOADS:
            n, latencies = run.intervals.get((load, index), (0, []))
            row[load] = {"count": n, "p50_ms": percentile(latencies, 0.5), "p99_ms": percentile(latencies, 0.99)}
        row["brokers"] = {str(b): {k: round(v, 2) for k, v in run.samples.get((b, index), {}).items()}
                          for b in range(1, run.brokers + 1)}
        intervals.append(row)
    baseline_index = max(0, int(kill_s // report_s) - 1)  # the interval ending at the first kill
    window = max(1, min(baseline_index + 1, int(round(args.growth_window_minutes * 60 / report_s))))
    growth = {}
    for figure in BROKER_FIGURES:
        per_broker, per_broker_point = {}, {}
        for b in range(1, run.brokers + 1):
            base = _largest(run.samples, b, figure, range(baseline_index - window + 1, baseline_index + 1))
            last = _largest(run.samples, b, figure, range(count - window, count))
            per_broker[str(b)] = growth_percent(base, last)
            per_broker_point[str(b)] = growth_percent(run.samples.get((b, baseline_index), {}).get(figure),
                                                      run.samples.get((b, count - 1), {}).get(figure))
        values = [v for v in per_broker.values() if v is not None]
        worst = max(values) if values else None
        points = [v for v in per_broker_point.values() if v is not None]
        growth[figure] = {"per_broker_percent": per_broker, "max_percent": worst,
                          "met": worst is not None and worst <= settings.BENCH_SOAK_GROWTH_PERCENT_MAX,
                          "per_broker_point_percent": per_broker_point,
                          "max_point_percent": max(points) if points else None}
    p99_ratio = {}
    periods = max(1, int(round(seconds / kill_s)))
    for load in LOADS:
        windows = []
        for period in range(periods):
            lat = [ms for (l, i), (_, values) in run.intervals.items() if l == load
                   and period * kill_s <= i * report_s < (period + 1) * kill_s for ms in values]
            windows.append(percentile(lat, 0.99))
        base = windows[0]
        later = [w for w in windows[1:] if w is not None]
        ratio = None if base in (None, 0) or not later else round(max(later) / base, 2)
        p99_ratio[load] = {"per_period_ms": windows, "ratio": ratio,
                           "met": ratio is not None and ratio <= settings.BENCH_SOAK_P99_RATIO_MAX}
    produce = run.finals["produce"][0]
    members = run.finals.get("group", [])
    read = [[seg for member in members for seg in member["segments"][p]] for p in range(PARTITIONS)]
    lost_produce = None if "group" in run.unfinished else \
        sum(missing_records(a, r) for a, r in zip(produce["segments"], read))
    queue_final = (run.finals.get("queue") or [None])[0] or {
        "enqueued": 0, "enqueue_failed": 0, "deliveries": 0, "acked": 0, "acked_twice": 0, "ack_errors": 0,
        "lost": None, "lease_counts": {}}
    messages = max(1, queue_final["enqueued"])
    return {"bench": "soak", "minutes": args.minutes, "kill_every_minutes": args.kill_every_minutes,
            "report_seconds": report_s, "sample_seconds": args.sample_seconds, "brokers": run.brokers,
            "rates_per_s": started_rates, "peaks_per_s": peaks, "peaks": args.peaks,
            "retention_bytes": args.retention_bytes,
            "kills": run.kills, "intervals": intervals, "baseline_interval": baseline_index,
            "growth_window_intervals": window,
            "growth": growth, "p99_ratio": p99_ratio,
            "lost": {"produce": lost_produce, "queue": queue_final["lost"]}, "unfinished": run.unfinished,
            "produce": {"acked": produce["acked"], "failed": produce["failed"]},
            "group": {"read": sum(m["read"] for m in members), "members": len(members),
                      "ends": members[0]["ends"] if members else None},
            "queue": {k: queue_final[k] for k in ("enqueued", "enqueue_failed", "deliveries", "acked",
                                                  "acked_twice", "ack_errors", "lease_counts")}
            | {"deliveries_per_message": round(queue_final["deliveries"] / messages, 4)}}


def markdown(result: dict) -> str:
    """The soak's summary and per-interval table."""
    g, r = result["growth"], result["p99_ratio"]
    window_s = result["growth_window_intervals"] * result["report_seconds"]
    lines = [f"# raftbus bench soak: {result['minutes']:g} minutes, a broker killed -9 every "
             f"{result['kill_every_minutes']:g} minutes", "",
             f"Rates: produce {result['rates_per_s']['produce']:,} records/s (`send_batch`), group consume what is "
             f"produced, queue {result['rates_per_s']['queue']:,} messages/s (enqueue, lease, ack); every produce "
             f"and enqueue acknowledged after majority commit. Kills: "
             + ", ".join(f"broker {k['broker']} at {k['at_s']:g} s" for k in result["kills"]) + ".", ""]
    if result.get("heap_trims"):
        lines += ["Heap trims since each broker last started: " + "; ".join(
            f"broker {b}: {t['trims']} in {t['uptime_s']} s, {t['busy_s']} s in all, the longest {t['longest_ms']} ms, "
            f"{t['returned_mb']} MB returned" for b, t in sorted(result["heap_trims"].items())) + ".", ""]
    lines += ["| verdict | figure | target | met |", "|---|---|---|---|"]
    for figure in BROKER_FIGURES:
        lines.append(f"| growth of the largest sample, last {window_s / 60:g} minutes against the "
                     f"{window_s / 60:g} before the first kill, worst broker | {figure} | ≤ "
                     f"{settings.BENCH_SOAK_GROWTH_PERCENT_MAX} % | {_fmt(g[figure]['max_percent'])} % "
                     f"{'yes' if g[figure]['met'] else 'no'} (last interval against the first kill's: "
                     f"{_fmt(g[figure]['max_point_percent'])} %) |")
    for load in LOADS:
        lines.append(f"| p99 latency, worst kill period / first | {load} | ≤ {settings.BENCH_SOAK_P99_RATIO_MAX} | "
                     f"{_fmt(r[load]['ratio'])} {'yes' if r[load]['met'] else 'no'} |")
    q = result["queue"]
    lost = {load: "not checked (did not finish)" if n is None else n for load, n in result["lost"].items()}
    lines += [f"| acknowledged records lost | produce → group | 0 | {lost['produce']} |",
              f"| acknowledged enqueues never acked | queue | 0 | {lost['queue']} |",
              f"| queue deliveries per message | queue | ≤ 1.05 | {q['deliveries_per_message']} |",
              f"| queue messages acked twice | queue | 0 | {q['acked_twice']} |", "",
              "| from s | produce /s | p50 / p99 ms | group /s | p50 / p99 ms | queue /s | p50 / p99 ms | "
              + " | ".join(f"b{b} anon (least beside the Raft log) / file (lmdb) MB, fds, lmdb / journal MB" for b in
                           range(1, result["brokers"] + 1)) + " |",
              "|" + "---:|" * (7 + result["brokers"])]
    span = result["report_seconds"]
    for row in result["intervals"]:
        cells = [f"{row['start_s']:g}"]
        for load in LOADS:
            x = row[load]
            cells += [f"{x['count'] / span:,.0f}", f"{_fmt(x['p50_ms'])} / {_fmt(x['p99_ms'])}"]
        for b in range(1, result["brokers"] + 1):
            s = row["brokers"][str(b)]
            cells.append(f"{_fmt(s.get('anon_mb'))} ({_fmt(s.get('anon_beside_log_mb'))}) / {_fmt(s.get('file_mb'))} "
                         f"({_fmt(s.get('lmdb_mapped_mb'))}), "
                         f"{_fmt(s.get('open_files'))}, {_fmt(s.get('lmdb_mb'))} / {_fmt(s.get('journal_mb'))}"
                         if s else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _fmt(value) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if isinstance(value, int) or abs(value) >= 100 else f"{value:,.1f}"


def plot(result: dict, path: str) -> None:
    """Anonymous and LMDB-mapped memory, open files and p99 latencies over the run, with the kills marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [row["start_s"] / 60 for row in result["intervals"]]
    fig, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    for b in range(1, result["brokers"] + 1):
        series = [row["brokers"][str(b)] for row in result["intervals"]]
        axes[0].plot(minutes, [s.get("anon_mb") for s in series], label=f"broker {b} anonymous")
        axes[0].plot(minutes, [s.get("anon_beside_log_mb") for s in series], linestyle="--",
                     label=f"broker {b} anonymous beside the Raft log")
        axes[0].plot(minutes, [s.get("lmdb_mapped_mb") for s in series], linestyle=":", label=f"broker {b} LMDB maps")
        axes[1].plot(minutes, [s.get("open_files") for s in series], label=f"broker {b}")
        axes[2].plot(minutes, [s.get("lmdb_mb") for s in series], label=f"broker {b} LMDB")
        axes[2].plot(minutes, [s.get("journal_mb") for s in series], linestyle=":", label=f"broker {b} journals")
    for load in LOADS:
        axes[3].plot(minutes, [row[load]["p99_ms"] for row in result["intervals"]], label=load)
    for ax, title in zip(axes, ("memory, MB", "open files", "files on disk, MB", "latency p99, ms")):
        ax.set_ylabel(title)
        ax.legend(fontsize=6, ncol=3)
        for kill in result["kills"]:
            ax.axvline(kill["at_s"] / 60, color="grey", linewidth=0.5)
    axes[3].set_xlabel("minutes (grey lines: a broker killed -9)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def bench_soak(args, fresh_cluster, progress) -> dict:
    check_soak_args(args)
    seconds = args.minutes * 60
    with fresh_cluster(args.brokers, progress) as cluster:
        with Admin(cluster.bootstrap) as admin:  # the peaks run on topics of their own, -peak
            for suffix in ("", "-peak"):
                admin.create_topic(STREAM_TOPIC + suffix, partitions=PARTITIONS,
                                   replication_factor=args.replication_factor, retention_bytes=args.retention_bytes)
                admin.create_topic(QUEUE_TOPIC + suffix, partitions=PARTITIONS,
                                   replication_factor=args.replication_factor, kind="queue")
        peaks = measure_peaks(cluster, args, progress)
        rates = {"produce": args.produce_rate_per_s or max(1, peaks["produce"] // 2),
                 "queue": args.queue_rate_per_s or max(1, peaks["queue"] // 2)}
        progress(f"soak: {args.minutes:g} minutes at {rates}, a broker killed every {args.kill_every_minutes:g} "
                 "minutes")
        run = SoakRun(cluster, args.brokers, args, progress)
        try:
            run.run_loads(rates, seconds)
        finally:
            run.close()
        heap = heap_trims(cluster, args.brokers)
    result = report(run, rates, peaks, seconds, args) | {"heap_trims": heap}
    if args.plot_out:
        plot(result, args.plot_out)
        progress(f"soak: plot written to {args.plot_out}")
    return result


def heap_trims(cluster, brokers: int) -> dict:
    """Each broker's heap trims since it last started (BrokerStats), by broker id; a broker restarted just before
    the end is waited for up to BENCH_CLUSTER_READY_TIMEOUT_MS (then left out)."""
    deadline = time.monotonic() + settings.BENCH_CLUSTER_READY_TIMEOUT_MS / 1000
    with Admin(cluster.bootstrap) as admin:
        while True:
            stats = admin.broker_stats()
            if len(stats) >= brokers or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    return {str(s.broker_id): {"uptime_s": round(s.uptime_s), "trims": s.heap_trims,
                               "busy_s": round(s.heap_trim_busy_s, 3), "longest_ms": round(s.heap_trim_longest_ms, 1),
                               "returned_mb": round(s.heap_trim_returned_bytes / 1e6, 1)} for s in stats}


def write_outputs(result: dict, args, progress) -> None:
    """The JSON (--out) and Markdown (--table-out) of a soak run."""
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        progress(f"results written to {args.out}")
    if args.table_out:
        Path(args.table_out).write_text(markdown(result))
        progress(f"table written to {args.table_out}")
