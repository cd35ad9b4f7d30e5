"""`raftbus bench failover|idle`: what a leader's kill -9 costs producers, and what idle partitions cost brokers.

Both start their own fresh local cluster of `brokers` broker processes (on loopback ports this process holds
reserved for them while the cluster lives, stopped by pid at the end), because failover kills and restarts brokers
and idle cost is only meaningful on a quiet cluster.

failover: a producer sends single records (linger 0) to partition 0 of a one-partition topic at
BENCH_LIGHT_LOAD_RATE_PER_S; each round kills -9 the partition's leader, measures, restarts the broker on its
data dir and waits until it is back in sync. At the end every acknowledged record is read back.
  failover_ms (p50, max)   from the kill to the acknowledgement of the first record sent after it
  unavailable_ms (max)     the longest time without any acknowledgement between the kill and that first one
                           (records already in flight at the kill may still be acknowledged meanwhile)
  acked_lost               acknowledged records missing when read back from the last leader (must be 0)
  group_coordinator_failover_ms (p50, max)
                           the Kafka port's group coordinator (the controller) killed -9 while a confluent-kafka
                           group member reads steadily produced records and commits each one synchronously: from
                           the kill to the first commit sent after it that succeeds (one round per
                           --failover-rounds)
idle: a topic of `idle_partitions` partitions, replication factor 3, nothing produced; once every partition
group has quiesced on every broker (BrokerStats groups_quiesced; at most BENCH_IDLE_SETTLE_MS), each broker's CPU
time over `idle_seconds` (from its own BrokerStats).
  idle_cpu_percent_max     the busiest broker's CPU, in % of one core; idle_cpu_percent per broker
  create_to_leaders_s      from the CreateTopic call to every partition having a leader
  leaders_to_quiesced_s    from then until every partition group quiesced (null: not within the settle bound)
  groups_quiesced_min      the fewest groups quiesced on one broker at the end of the measurement
  broker_rss_mb            each broker's resident memory at the end (broker_rss_mb_max the largest)
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from raftbus.broker.supervisor import ReservedPorts
from raftbus.client import settings
from raftbus.client.admin import Admin
from raftbus.client.errors import RaftbusError, Unavailable
from raftbus.client.producer import Producer
from raftbus.client.reader import Reader

LOOPBACK = "127.0.0.1"
LOG_TAIL_BYTES_MAX = 2_000  # of a server's log, quoted when it exits or fails to start


def log_tail(path: Path) -> str:
    """The end of a server's log ("" when it has none)."""
    try:
        return path.read_bytes()[-LOG_TAIL_BYTES_MAX:].decode(errors="replace")
    except OSError:
        return ""


def add_ops_arguments(parser) -> None:
    parser.add_argument("--failover-rounds", type=int, default=settings.BENCH_FAILOVER_ROUNDS,
                        help="failover: leader kills")
    parser.add_argument("--idle-partitions", type=int, default=settings.BENCH_IDLE_PARTITIONS,
                        help="idle: partitions of the idle topic")
    parser.add_argument("--idle-seconds", type=float, default=settings.BENCH_IDLE_SECONDS,
                        help="idle: how long CPU is measured")


class BrokerSet:
    """`count` broker processes started and stopped (by pid) one by one, each on its own data dir.

    Their client, Raft and Kafka ports are ones the kernel picked and this process holds (ReservedPorts) until
    `close`; the brokers bind them beside the hold (listen_reuse_port). No other process, nor an outgoing
    connection's ephemeral port, can take one between the pick and a broker's bind, nor while a killed broker is
    down, so a restarted broker comes back at the same addresses.
    """

    def __init__(self, count: int, root: Path, kafka: bool = False):
        self.root = root
        self._held = ReservedPorts(3 * count if kafka else 2 * count, host=LOOPBACK)
        held = self._held.ports
        self.ports = [(held[2 * i], held[2 * i + 1]) for i in range(count)]
        self.kafka_ports = held[2 * count:] if kafka else []
        self.peers = ",".join(f"{i + 1}@{LOOPBACK}:{raft}" for i, (_, raft) in enumerate(self.ports))
        self.procs: dict[int, subprocess.Popen] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{LOOPBACK}:{grpc}" for grpc, _ in self.ports)

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(f"{LOOPBACK}:{port}" for port in self.kafka_ports)

    def start(self, node_id: int) -> None:
        grpc_port, raft_port = self.ports[node_id - 1]
        log = open(self.root / f"broker-{node_id}.log", "ab")
        cmd = [sys.executable, "-m", "raftbus.broker", "start", "--node-id", str(node_id),
               "--data-dir", str(self.root / f"broker-{node_id}"), "--listen", f"{LOOPBACK}:{grpc_port}",
               "--raft-listen", f"{LOOPBACK}:{raft_port}", "--peers", self.peers, "--log-level", "WARNING"]
        if self.kafka_ports:
            cmd += ["--kafka-listen", f"{LOOPBACK}:{self.kafka_ports[node_id - 1]}"]
        env = {**os.environ, "RAFTBUS_LISTEN_REUSE_PORT": "true"}
        self.procs[node_id] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL,
                                               env=env)
        log.close()

    def kill(self, node_id: int) -> None:
        proc = self.procs.pop(node_id)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + settings.BENCH_CLUSTER_STOP_TIMEOUT_MS / 1000
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def close(self) -> None:
        """Stop every broker and release the held ports."""
        self.stop()
        self._held.close()

    def exited(self) -> str | None:
        """A started broker that has exited, with the end of its log; None while all run."""
        for node_id, proc in self.procs.items():
            if proc.poll() is not None:
                log = log_tail(self.root / f"broker-{node_id}.log")
                return f"broker {node_id} exited with {proc.returncode}: {log}"
        return None


def wait_for(predicate, timeout_s: float, what: str, gone=lambda: None):
    """Poll until predicate() is truthy (RaftbusErrors count as not yet); Unavailable after timeout_s, or as soon
    as gone() names a reason the wait cannot succeed."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        reason = gone()
        if reason:
            raise Unavailable(f"{what} not reached: {reason}")
        try:
            value = predicate()
            if value:
                return value
            last = value
        except RaftbusError as err:
            last = err
        time.sleep(0.05)
    raise Unavailable(f"{what} not reached within {timeout_s:g} s (last: {last})")


class fresh_cluster:
    """Context manager: a new local cluster, ready (every broker registered, a controller), stopped at exit."""

    def __init__(self, brokers: int, progress, kafka: bool = False):
        self.brokers = brokers
        self.progress = progress
        self.kafka = kafka

    def __enter__(self) -> BrokerSet:
        self.root = Path(tempfile.mkdtemp(prefix="raftbus-bench-ops-"))
        self.cluster = BrokerSet(self.brokers, self.root, kafka=self.kafka)
        self.progress(f"starting {self.brokers} fresh brokers in {self.root}")

        def ready():
            with Admin(self.cluster.bootstrap) as admin:
                status = admin.cluster_status()
                return status.controller_id and sum(b.alive for b in status.brokers) == self.brokers

        try:
            for node_id in range(1, self.brokers + 1):
                self.cluster.start(node_id)
            wait_for(ready, settings.BENCH_CLUSTER_READY_TIMEOUT_MS / 1000, "cluster ready", gone=self.cluster.exited)
        except BaseException:
            self.__exit__()  # a cluster that never got ready is stopped all the same
            raise
        return self.cluster

    def __exit__(self, *exc) -> None:
        self.cluster.close()
        shutil.rmtree(self.root, ignore_errors=True)


# ---------------------------------------------------------------------- failover

class AckLog:
    """When each record was sent and acknowledged (monotonic seconds), and at which offset; thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._times: list[tuple[float, float]] = []  # (sent, acknowledged)
        self.acked: dict[bytes, int] = {}  # value -> offset
        self.failed = 0

    def record(self, value: bytes, sent_s: float, acked_s: float, offset: int | None) -> None:
        with self._lock:
            if offset is None:
                self.failed += 1
                return
            self._times.append((sent_s, acked_s))
            self.acked[value] = offset

    def __len__(self) -> int:
        with self._lock:
            return len(self._times)

    def first_ack_of_a_send_after(self, t: float) -> float | None:
        with self._lock:
            later = [acked for sent, acked in self._times if sent >= t]
        return min(later) if later else None

    def longest_gap_between(self, start: float, end: float) -> float:
        """The longest time without an acknowledgement within [start, end]."""
        with self._lock:
            times = sorted(acked for _, acked in self._times if start <= acked <= end)
        marks = [start, *times, end]
        return max(b - a for a, b in zip(marks, marks[1:]))


class SteadySender:
    """Single-record sends to partition 0 at a fixed rate from a thread; every outcome goes to `log`."""

    def __init__(self, bootstrap: str, topic: str, rate_per_s: int):
        self.topic = topic
        self.interval_s = 1 / rate_per_s
        self.producer = Producer(bootstrap, linger_ms=0)
        self.log = AckLog()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "SteadySender":
        self._thread.start()
        return self

    def _run(self) -> None:
        sent = 0
        next_s = time.monotonic()
        while not self._stop.is_set():
            value = f"failover-{sent}".encode()
            sent_s = time.monotonic()
            future = self.producer.send(self.topic, value, partition=0)
            future.add_done_callback(lambda f, v=value, s=sent_s: self.log.record(
                v, s, time.monotonic(), None if f.exception() else f.result().offset))
            sent += 1
            next_s += self.interval_s
            self._stop.wait(max(0.0, next_s - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(settings.BENCH_CLUSTER_READY_TIMEOUT_MS / 1000)
        self.producer.close()


def leader_of(bootstrap: str, topic: str) -> int | None:
    with Admin(bootstrap) as admin:
        return admin.describe_topic(topic).partitions[0].leader_id


def in_sync(bootstrap: str, topic: str, replicas: int) -> bool:
    with Admin(bootstrap) as admin:
        partition = admin.describe_topic(topic).partitions[0]
    return bool(partition.leader_id) and len(partition.isr) == replicas


def kill_leader_round(cluster: BrokerSet, log: AckLog, topic: str, brokers: int) -> dict:
    """Kill -9 the leader, measure until a record sent afterwards is acknowledged, restart it, wait for sync."""
    victim = leader_of(cluster.bootstrap, topic)
    killed_s = time.monotonic()
    cluster.kill(victim)
    acked_s = wait_for(lambda: log.first_ack_of_a_send_after(killed_s), 30, "an acknowledgement after the kill")
    gap_s = log.longest_gap_between(killed_s, acked_s)
    cluster.start(victim)
    wait_for(lambda: in_sync(cluster.bootstrap, topic, brokers), 60, "the restarted broker back in sync")
    return {"victim": victim, "failover_ms": round((acked_s - killed_s) * 1000, 1),
            "unavailable_ms": round(gap_s * 1000, 1)}


def acked_lost(bootstrap: str, topic: str, acked: dict[bytes, int]) -> int:
    """How many acknowledged records are missing, or not at their acknowledged offset, when read back."""
    with Reader(bootstrap) as reader:
        found = {r.value: r.offset for r in reader.iter_partition(topic, 0, stop_at_end=True)}
    return sum(1 for value, offset in acked.items() if found.get(value) != offset)


class CommittingMember:
    """A confluent-kafka group member on a thread: reads the group topic and commits each record synchronously;
    the (sent, done) times of its successful commits go to `commits`."""

    def __init__(self, kafka: str, topic: str, group: str):
        self.commits: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(kafka, topic, group), daemon=True)
        self._thread.start()

    def _run(self, kafka: str, topic: str, group: str) -> None:
        from confluent_kafka import Consumer, KafkaException

        consumer = Consumer({"bootstrap.servers": kafka, "group.id": group, "enable.auto.commit": False,
                             "auto.offset.reset": "latest", "session.timeout.ms": 10_000,
                             "log_level": 2})  # the kills' connection errors are expected: not on stderr
        consumer.subscribe([topic])
        while not self._stop.is_set():
            message = consumer.poll(0.05)
            if message is None or message.error() is not None:
                continue
            sent_s = time.monotonic()
            try:
                consumer.commit(message, asynchronous=False)
            except KafkaException:
                continue
            with self._lock:
                self.commits.append((sent_s, time.monotonic()))
        consumer.close()

    def first_commit_sent_after(self, t: float) -> float | None:
        with self._lock:
            later = [done for sent, done in self.commits if sent >= t]
        return min(later) if later else None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def coordinator_failover_rounds(cluster: BrokerSet, args, progress) -> list[float]:
    """kill -9 of the Kafka group coordinator (the controller), once per round: ms to the next commit."""
    topic = "bench-failover-group"
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, partitions=1, replication_factor=args.replication_factor)
    sender = SteadySender(cluster.bootstrap, topic, settings.BENCH_LIGHT_LOAD_RATE_PER_S).start()
    member = CommittingMember(cluster.kafka_bootstrap, topic, "bench-failover-group")
    rounds = []
    try:
        for round_number in range(1, args.failover_rounds + 1):
            wait_for(lambda: member.first_commit_sent_after(time.monotonic() - 1), 60, "the member committing")
            with Admin(cluster.bootstrap) as admin:
                victim = admin.cluster_status().controller_id
            progress(f"coordinator failover round {round_number}: kill -9 of the controller (broker {victim})")
            killed_s = time.monotonic()
            cluster.kill(victim)
            done_s = wait_for(lambda: member.first_commit_sent_after(killed_s), 60, "a commit after the kill")
            rounds.append(round((done_s - killed_s) * 1000, 1))
            progress(f"  next commit after {rounds[-1]} ms")
            cluster.start(victim)
            wait_for(lambda: in_sync(cluster.bootstrap, topic, args.replication_factor), 60,
                     "the restarted broker back in sync")
    finally:
        member.stop()
        sender.stop()
    return rounds


def bench_failover(args, percentile, progress) -> dict:
    topic = "bench-failover"
    with fresh_cluster(args.brokers, progress, kafka=True) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic(topic, partitions=1, replication_factor=args.replication_factor)
        sender = SteadySender(cluster.bootstrap, topic, settings.BENCH_LIGHT_LOAD_RATE_PER_S).start()
        try:
            wait_for(lambda: len(sender.log) >= settings.BENCH_LIGHT_LOAD_RATE_PER_S, 30, "steady produce")
            rounds = []
            for round_number in range(1, args.failover_rounds + 1):
                progress(f"failover round {round_number}: kill -9 of the leader of {topic}/0")
                rounds.append(kill_leader_round(cluster, sender.log, topic, args.replication_factor))
                progress(f"  {rounds[-1]}")
        finally:
            sender.stop()
        lost = acked_lost(cluster.bootstrap, topic, dict(sender.log.acked))
        coordinator = coordinator_failover_rounds(cluster, args, progress)
    failovers = [r["failover_ms"] for r in rounds]
    return {"bench": "failover", "failover_p50_ms": percentile(failovers, 0.5), "failover_max_ms": max(failovers),
            "unavailable_max_ms": max(r["unavailable_ms"] for r in rounds), "rounds": len(rounds),
            "acked": len(sender.log.acked), "acked_lost": lost, "send_failures": sender.log.failed,
            "rate_per_s": settings.BENCH_LIGHT_LOAD_RATE_PER_S, "brokers": args.brokers,
            "replication_factor": args.replication_factor, "per_round": rounds,
            "group_coordinator_failover_p50_ms": percentile(coordinator, 0.5),
            "group_coordinator_failover_max_ms": max(coordinator),
            "group_coordinator_failover_per_round_ms": coordinator}


# ---------------------------------------------------------------------- idle

def cpu_seconds(admin: Admin) -> dict[int, float]:
    return {s.broker_id: s.cpu_user_s + s.cpu_system_s for s in admin.broker_stats()}


def with_brokers_cpu(bootstrap: str, work):
    """(work(), CPU seconds (user + system) the brokers spent while it ran, summed over the brokers that answered
    before and after)."""
    with Admin(bootstrap) as admin:
        before = cpu_seconds(admin)
        result = work()
        after = cpu_seconds(admin)
    return result, sum(cpu - before[broker] for broker, cpu in after.items() if broker in before)


def wait_quiesced(admin: Admin, timeout_s: float) -> float | None:
    """Seconds until every partition group quiesced on every broker (the metadata group never does), None when
    that takes longer than `timeout_s`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if all(s.groups_quiesced >= s.groups_hosted - 1 for s in admin.broker_stats()):
            return time.monotonic() - started
        time.sleep(0.5)
    return None


def bench_idle(args, progress) -> dict:
    topic = "bench-idle"
    with fresh_cluster(args.brokers, progress) as cluster:
        with Admin(cluster.bootstrap, topic_ready_timeout_ms=settings.BENCH_IDLE_LEADERS_TIMEOUT_MS) as admin:
            progress(f"creating {topic} with {args.idle_partitions} partitions, replication factor "
                     f"{args.replication_factor}")
            created_s = time.monotonic()
            admin.create_topic(topic, partitions=args.idle_partitions, replication_factor=args.replication_factor)
            leaders_s = time.monotonic() - created_s
            progress(f"every partition has a leader after {leaders_s:.1f} s")
            settled_s = wait_quiesced(admin, settings.BENCH_IDLE_SETTLE_MS / 1000)
            progress(f"every partition group quiesced on every broker after {settled_s:.1f} s more"
                     if settled_s is not None else "not every group quiesced; measuring anyway")
            before, started = cpu_seconds(admin), time.monotonic()
            progress(f"measuring broker CPU for {args.idle_seconds:g} s")
            time.sleep(args.idle_seconds)
            after, elapsed = cpu_seconds(admin), time.monotonic() - started
            stats = admin.broker_stats()
    percent = {b: round(100 * (after[b] - before[b]) / elapsed, 2) for b in sorted(after) if b in before}
    return {"bench": "idle", "idle_cpu_percent_max": max(percent.values()),
            "idle_cpu_percent": {str(b): p for b, p in percent.items()},
            "partitions": args.idle_partitions, "replicas_per_broker": max(s.groups_hosted - 1 for s in stats),
            "create_to_leaders_s": round(leaders_s, 1),
            "leaders_to_quiesced_s": round(settled_s, 1) if settled_s is not None else None,
            "groups_quiesced_min": min(s.groups_quiesced for s in stats),
            "broker_rss_mb_max": round(max(s.rss_bytes for s in stats) / 1e6, 1),
            "broker_rss_mb": {str(s.broker_id): round(s.rss_bytes / 1e6, 1) for s in stats},
            "seconds": args.idle_seconds, "brokers": args.brokers, "replication_factor": args.replication_factor}
