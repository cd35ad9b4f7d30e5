"""`raftbus bench queue`: lease+ack throughput of a priority queue topic, and lateness of delayed messages.

1. enqueue `--messages` messages of `--record-bytes` bytes with random priorities 0-9 (Producer, per-message
   send, batched by partition) — enqueue_per_s, and the CPU per message of every broker and of the producer
   processes over that phase (enqueue_broker_cpu_us_per_message, enqueue_client_cpu_us_per_message);
2. `--consumers` processes lease and ack them all, BENCH_QUEUE_CALLERS_PER_PARTITION threads per partition, with
   batched calls (Lease of `--lease-batch` messages, BENCH_QUEUE_LEASE_BATCH_MESSAGES by default, then one Ack of
   the batch; packed answers and acks, as the SDK sends them) — lease_ack_per_s from the first lease to the last
   ack; priority_order_violations counts leases that came out of priority order within a caller (0 when it
   holds); lease_ack_broker_cpu_us_per_message is the CPU time of every broker (user + system, from BrokerStats,
   leaders and followers together) over that phase per message, lease_ack_client_cpu_us_per_message that of
   the consumer processes: CPU time, which a busy shared machine distorts much less than wall-clock rates;
3. `--delayed-messages` messages due 0.5-3 s ahead are streamed to a QueueConsumer, which notes when each one
   arrives — lateness_p50/p99_ms is arrival minus deliver_at_ms (by this machine's clock, as the brokers').
"""
from __future__ import annotations

import itertools
import os
import random
import resource
import threading
import time

from raftbus.client import settings
from raftbus.client.admin import Admin
from raftbus.bench.ops import with_brokers_cpu
from raftbus.client.errors import RequestTimedOut
from raftbus.client.producer import Producer
from raftbus.client.queues.consumer import QueueConsumer
from raftbus.client.queues.producer import QueueStubs
from raftbus.client.queues.codec import lease_heads, pack_leases
from raftbus.client.router import Router
from raftbus.client.wire import queues_pb2 as qpb

DELAY_MIN_MS, DELAY_MAX_MS = 500, 3_000
LEASE_VISIBILITY_MS = 60_000
PRIORITIES = 10


def add_queue_arguments(parser) -> None:
    parser.add_argument("--messages", type=int, default=200_000, help="queue: messages leased and acked")
    parser.add_argument("--consumers", type=int, default=1, help="queue: lease+ack processes")
    parser.add_argument("--lease-batch", type=int, default=settings.BENCH_QUEUE_LEASE_BATCH_MESSAGES,
                        help="queue: messages per lease and ack (at most the brokers' queue_lease_messages_max)")
    parser.add_argument("--delayed-messages", type=int, default=2_000, help="queue: delayed messages timed")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------------- load processes (bench.run_workers)
def enqueue_load(spec, ready) -> dict:
    """Enqueue spec.records messages with random priorities, keyless (sticky partitions)."""
    rng = random.Random(spec.records)
    value = bytes(spec.record_bytes)
    with Producer(spec.bootstrap, linger_ms=spec.linger_ms, batch_bytes_max=spec.batch_bytes_max) as producer:
        ready()
        started_s, started_cpu_s = time.monotonic(), process_cpu_s()
        futures = [producer.send(spec.topic, value, priority=rng.randrange(PRIORITIES)) for _ in range(spec.records)]
        producer.flush()
        for future in futures:
            future.result()
        finished_s, cpu_s = time.monotonic(), process_cpu_s() - started_cpu_s
    return {"records": spec.records, "value_bytes": spec.records * spec.record_bytes, "started_s": started_s,
            "finished_s": finished_s, "cpu_s": cpu_s}


def _drain_partition(stubs: QueueStubs, router: Router, topic: str, partition: int, batch: int, out: dict,
                     caller: int) -> None:
    """Lease and ack until a lease comes back empty; count messages and priority inversions (one caller's
    leases come out in priority order; callers on one partition interleave). Packed answers and acks, as the
    SDK sends them; each caller is a settler of its own, so a retried ack would be answered as first applied."""
    done = inversions = 0
    last_priority = -1
    settler_id = os.urandom(16)
    request = qpb.LeaseRequest(topic=topic, partition=partition, max_messages=batch,
                               visibility_ms=LEASE_VISIBILITY_MS, packed=True)
    for sequence in itertools.count(1):
        packed = router.call_partition(topic, partition,
                                       lambda conn: stubs(conn).Lease(request, timeout=30)).packed_messages
        if not packed:
            break
        heads = lease_heads(packed)
        for _, priority, _ in heads:
            inversions += priority < last_priority
            last_priority = priority
        ack = qpb.AckRequest(topic=topic, partition=partition, settler_id=settler_id, sequence=sequence,
                             packed_leases=pack_leases((mid, count) for mid, _, count in heads))
        answer = router.call_partition(topic, partition, lambda conn: stubs(conn).Ack(ack, timeout=30))
        done += len(heads) - len(answer.failures)
    out[(partition, caller)] = (done, inversions)


def lease_ack_load(spec, ready) -> dict:
    """Drain spec.partitions of spec.topic, one thread per partition, batch = spec.records (the lease batch)."""
    with Router(spec.bootstrap) as router:
        stubs = QueueStubs(router)
        for partition in spec.partitions:
            router.leader_address(spec.topic, partition)
        ready()
        out: dict[tuple[int, int], tuple[int, int]] = {}
        threads = [threading.Thread(target=_drain_partition, args=(stubs, router, spec.topic, p, spec.records, out, i))
                   for p in spec.partitions for i in range(settings.BENCH_QUEUE_CALLERS_PER_PARTITION)]
        started_s, started_cpu_s = time.monotonic(), process_cpu_s()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        finished_s, cpu_s = time.monotonic(), process_cpu_s() - started_cpu_s
    return {"records": sum(d for d, _ in out.values()), "inversions": sum(i for _, i in out.values()),
            "value_bytes": 0, "started_s": started_s, "finished_s": finished_s, "cpu_s": cpu_s}


def process_cpu_s() -> float:
    """User + system CPU time of this process (all its threads) so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------------- delayed delivery
def delayed_lateness_ms(bootstrap: str, topic: str, count: int) -> list[float]:
    """Enqueue `count` messages due 0.5-3 s ahead and stream them; the lateness of each arrival in ms."""
    rng = random.Random(count)
    lateness: list[float] = []
    with QueueConsumer(bootstrap, topics=[topic], prefetch=1_000) as consumer:
        with Producer(bootstrap, linger_ms=1) as producer:
            futures = []
            for _ in range(count):
                deliver_at_ms = now_ms() + rng.randint(DELAY_MIN_MS, DELAY_MAX_MS)
                futures.append(producer.send(topic, str(deliver_at_ms), deliver_at_ms=deliver_at_ms))
            producer.flush()
            for future in futures:
                future.result()
        deadline_s = time.monotonic() + DELAY_MAX_MS / 1000 + settings.REQUEST_TIMEOUT_MS / 1000
        while len(lateness) < count:
            if time.monotonic() > deadline_s:
                raise RequestTimedOut(f"only {len(lateness)} of {count} delayed messages arrived")
            for message in consumer.poll(0.5):
                lateness.append(now_ms() - int(message.value))
                message.ack()
        consumer.flush(settings.REQUEST_TIMEOUT_MS / 1000)
    return lateness


def cpu_us_per(cpu_s: float, messages: int) -> float | None:
    return round(cpu_s * 1e6 / messages, 1) if messages else None


# ---------------------------------------------------------------------- the workload
def bench_queue(bootstrap: str, args, run_workers, worker_spec, percentile, rounded_ms, progress) -> dict:
    topic = f"bench-queue-{now_ms()}"
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions=args.partitions, replication_factor=args.replication_factor,
                           kind="queue", ordering="priority")
        brokers = len(admin.cluster_status().brokers)
    partitions = tuple(range(args.partitions))
    producers = max(1, args.producers)
    progress(f"enqueueing {args.messages} messages to {topic} with {producers} producer process(es)")
    shares = [args.messages // producers + (i < args.messages % producers) for i in range(producers)]
    enqueued, enqueue_broker_cpu_s = with_brokers_cpu(bootstrap, lambda: run_workers(enqueue_load, [
        worker_spec(bootstrap, topic, partitions, n, args.record_bytes, args.linger_ms, args.batch_bytes_max)
        for n in shares if n]))
    enqueue_s = max(r["finished_s"] for r in enqueued) - min(r["started_s"] for r in enqueued)
    consumers = max(1, min(args.consumers, args.partitions))
    progress(f"leasing and acking them with {consumers} process(es), {args.lease_batch} per call")
    drained, broker_cpu_s = with_brokers_cpu(bootstrap, lambda: run_workers(lease_ack_load, [
        worker_spec(bootstrap, topic, partitions[i::consumers], args.lease_batch) for i in range(consumers)]))
    messages = sum(r["records"] for r in drained)
    drain_s = max(r["finished_s"] for r in drained) - min(r["started_s"] for r in drained)
    lateness: list[float] = []
    if args.delayed_messages:
        progress(f"streaming {args.delayed_messages} delayed messages")
        with Admin(bootstrap) as admin:
            admin.create_topic(f"{topic}-delayed", partitions=args.partitions,
                               replication_factor=args.replication_factor, kind="queue")
        lateness = delayed_lateness_ms(bootstrap, f"{topic}-delayed", args.delayed_messages)
    return {"bench": "queue", "messages": messages, "record_bytes": args.record_bytes,
            "lease_ack_per_s": round(messages / max(drain_s, 1e-9)), "lease_ack_elapsed_s": round(drain_s, 3),
            "lease_ack_broker_cpu_us_per_message": cpu_us_per(broker_cpu_s, messages),
            "lease_ack_client_cpu_us_per_message": cpu_us_per(sum(r["cpu_s"] for r in drained), messages),
            "enqueue_per_s": round(args.messages / max(enqueue_s, 1e-9)),
            "enqueue_broker_cpu_us_per_message": cpu_us_per(enqueue_broker_cpu_s, args.messages),
            "enqueue_client_cpu_us_per_message": cpu_us_per(sum(r["cpu_s"] for r in enqueued), args.messages),
            "priority_order_violations": sum(r["inversions"] for r in drained),
            "delayed_messages": len(lateness), "lateness_p50_ms": rounded_ms(percentile(lateness, 0.50)),
            "lateness_p99_ms": rounded_ms(percentile(lateness, 0.99)), "brokers": brokers,
            "partitions": args.partitions, "replication_factor": args.replication_factor,
            "producers": producers, "consumers": consumers, "lease_batch": args.lease_batch, "topic": topic}

