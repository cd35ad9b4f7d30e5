"""`raftbus bench consume --group`: consume with a consumer group, committing per batch, and rebalance times.

Throughput: `readers` Consumer processes of one new group read a topic holding `records` records from the
beginning; each poll's batch is committed (commit_async) right after it is counted. Records are counted from
batch headers (ConsumerRecords is lazy); by default every record is also decoded into a Record, as an
application reading them would (--no-decode leaves that out, to show what the fetch path alone costs).
  records_per_s, mb_per_s     records of the topic over the fetch time, from the first records any member
                              polled to the last commit (as Kafka's consumer perf test, the group's first
                              join is left out and reported as first_join_ms; records_per_s_with_join has it)
  records_polled              records handed out, including any read twice around the start-up rebalances
  commits, records_per_commit commit calls (one per poll; a poll fetches about one producer batch per partition)
Rebalance (a second group on the same topic, measured by the members themselves):
  rebalance_join_ms           a member joins a group of one, stable for BENCH_REBALANCE_STABLE_MS (1 s): from
                              its join until it owns its share
  rebalance_death_ms          a member process is killed -9: until the survivors own every partition again;
                              most of it is the session timeout (session_timeout_ms, reported alongside)
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass

from raftbus.client import settings
from raftbus.client.consumer import EARLIEST, Consumer
from raftbus.client.errors import RequestTimedOut
from raftbus.client.groups.calls import TopicPartition
from raftbus.client.reader import Reader


@dataclass(frozen=True)
class GroupLoad:
    """What one consumer process of the throughput run does."""

    bootstrap: str
    topic: str
    group: str
    end_offsets: tuple[int, ...]
    decode: bool = True
    fetch_bytes_max: int = settings.BENCH_GROUP_FETCH_BYTES_MAX


def group_consume_load(spec: GroupLoad, ready) -> dict:
    """Poll and commit per batch until the whole group has committed the end of every partition."""
    records = value_bytes = commits = 0
    first_records_s = None
    consumer = Consumer(spec.bootstrap, group=spec.group, topics=[spec.topic], auto_offset_reset=EARLIEST,
                        enable_auto_commit=False, max_poll_records=settings.BENCH_GROUP_POLL_RECORDS_MAX,
                        fetch_bytes_max=spec.fetch_bytes_max, buffer_bytes_max=4 * spec.fetch_bytes_max)
    try:
        ready()
        started_s = time.monotonic()
        while not _group_done(consumer, spec):
            polled = consumer.poll(0.2)
            if not polled:
                continue
            if first_records_s is None:
                first_records_s = time.monotonic()
            records += len(polled)
            if spec.decode:
                value_bytes += sum(len(r.value or b"") for r in polled)
            consumer.commit_async(polled_end_offsets(polled))
            commits += 1
        finished_s = time.monotonic()
    finally:
        consumer.close()
    return {"records": records, "value_bytes": value_bytes, "commits": commits, "started_s": started_s,
            "first_records_s": first_records_s if first_records_s is not None else finished_s,
            "finished_s": finished_s}


def polled_end_offsets(polled) -> dict[TopicPartition, int]:
    return {tp: end for tp, (_, end) in polled.offsets().items()}


def _group_done(consumer: Consumer, spec: GroupLoad) -> bool:
    """True once this member is at the end of what it owns and the group committed every partition's end."""
    owned = consumer.assignment()
    if not owned or any(consumer.position(tp) < spec.end_offsets[tp.partition] for tp in owned):
        return False
    consumer.commit()
    ends = [consumer.calls.fetch_offset(spec.group, TopicPartition(spec.topic, p)).committed_offset
            for p in range(len(spec.end_offsets))]
    return ends == list(spec.end_offsets)


def bench_group_consume(bootstrap: str, args, topic: str, brokers: int, run_workers, rate_figures) -> dict:
    with Reader(bootstrap) as reader:
        ends = tuple(reader.offsets(topic, p)[1] for p in range(args.partitions))
    group = f"bench-group-{time.time_ns() // 1_000_000}"
    readers = max(1, min(args.readers, args.partitions))
    spec = GroupLoad(bootstrap, topic, group, ends, args.decode)
    results = run_workers(group_consume_load, [spec] * readers)
    total = sum(ends)
    commits = sum(r["commits"] for r in results)
    started_s = min(r["started_s"] for r in results)
    first_records_s = min(r["first_records_s"] for r in results)
    finished_s = max(r["finished_s"] for r in results)
    # As Kafka's consumer perf test: the rate is over the fetch time, from the first records polled (the
    # group's first assignment done) to the last commit; the join before it is reported on its own.
    figures = rate_figures(total, total * args.record_bytes, finished_s - first_records_s)
    with_join = rate_figures(total, total * args.record_bytes, finished_s - started_s)
    rebalance = measure_rebalance(bootstrap, topic, args)
    return {"bench": "consume-group", "records": total, "record_bytes": args.record_bytes, **figures,
            "records_polled": sum(r["records"] for r in results), "commits": commits,
            "records_per_commit": round(total / max(commits, 1)),
            "first_join_ms": round((first_records_s - started_s) * 1000, 1),
            "records_per_s_with_join": with_join["records_per_s"],
            "decode": args.decode, **rebalance, "brokers": brokers, "partitions": args.partitions,
            "replication_factor": args.replication_factor, "readers": readers, "topic": topic}


# ---------------------------------------------------------------------- rebalance times

class PollingMember:
    """A Consumer polling on a thread of this process (its assignment is read from the measuring thread)."""

    def __init__(self, bootstrap: str, topic: str, group: str, session_timeout_ms: int):
        self.consumer = Consumer(bootstrap, group=group, topics=[topic], auto_offset_reset=EARLIEST,
                                 session_timeout_ms=session_timeout_ms,
                                 heartbeat_interval_ms=settings.BENCH_GROUP_HEARTBEAT_INTERVAL_MS)
        self.owned: frozenset = frozenset()
        self.started_s = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.05)
            self.owned = frozenset(self.consumer.assignment())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


def _member_process(bootstrap: str, topic: str, group: str, session_timeout_ms: int, owned) -> None:
    """A member in its own process (to be killed -9); reports how many partitions it owns."""
    consumer = Consumer(bootstrap, group=group, topics=[topic], auto_offset_reset=EARLIEST,
                        session_timeout_ms=session_timeout_ms,
                        heartbeat_interval_ms=settings.BENCH_GROUP_HEARTBEAT_INTERVAL_MS)
    while True:
        consumer.poll(0.05)
        owned.value = len(consumer.assignment())


def _wait(predicate, timeout_s: float, what: str) -> float:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RequestTimedOut(f"rebalance bench: {what} not seen within {timeout_s:g} s")
        time.sleep(0.002)
    return time.monotonic()


def measure_rebalance(bootstrap: str, topic: str, args) -> dict:
    """Join: a member joins a stable member. Death: a third member (a process) is killed -9."""
    if args.partitions < 3:  # nothing to share among three members
        return {"rebalance_join_ms": None, "rebalance_death_ms": None, "session_timeout_ms": args.session_timeout_ms}
    group = f"bench-rebalance-{time.time_ns() // 1_000_000}"
    timeout_s = settings.BENCH_REBALANCE_TIMEOUT_MS / 1000
    first = PollingMember(bootstrap, topic, group, args.session_timeout_ms)
    members = [first]
    ctx = multiprocessing.get_context("spawn")
    victim = None
    try:
        _wait(lambda: len(first.owned) == args.partitions, timeout_s, "the first member owning everything")
        time.sleep(settings.BENCH_REBALANCE_STABLE_MS / 1000)
        second = PollingMember(bootstrap, topic, group, args.session_timeout_ms)
        members.append(second)
        share = args.partitions // 2
        joined_s = _wait(lambda: len(second.owned) >= share, timeout_s, "the joining member's share")
        join_ms = (joined_s - second.started_s) * 1000
        owned = ctx.Value("i", 0)
        victim = ctx.Process(target=_member_process, args=(bootstrap, topic, group, args.session_timeout_ms, owned),
                             daemon=True)
        victim.start()
        settled = lambda: (owned.value > 0 and not first.owned & second.owned  # noqa: E731
                           and len(first.owned) + len(second.owned) + owned.value == args.partitions)
        _wait(settled, timeout_s + settings.BENCH_WORKER_READY_TIMEOUT_MS / 1000,
              "three members sharing every partition")
        os.kill(victim.pid, signal.SIGKILL)
        killed_s = time.monotonic()
        recovered_s = _wait(lambda: len(first.owned | second.owned) == args.partitions,
                            timeout_s + args.session_timeout_ms / 1000, "the survivors owning every partition")
    finally:
        if victim is not None and victim.is_alive():
            victim.kill()
        for member in members:
            member.close()
    return {"rebalance_join_ms": round(join_ms, 1), "rebalance_death_ms": round((recovered_s - killed_s) * 1000, 1),
            "session_timeout_ms": args.session_timeout_ms}
