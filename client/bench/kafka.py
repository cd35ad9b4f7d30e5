"""`raftbus bench kafka` (and part of `all`): the Kafka port driven by confluent-kafka (librdkafka), on the same
cluster and in the same run as the SDK's rows, so the table shows them side by side.

- producer: one process, acks=all (a majority commit), 100-byte records, linger.ms 5, produce() per record;
- per-record produce() with --producers processes (2);
- consumer: --readers processes reading the topic from the beginning (assign, no group), every record handed
  to Python, with fetch.queue.backoff.ms 10 (CONSUMER_FETCH; the group consumer too);
- light load: BENCH_LIGHT_LOAD_RATE_PER_S single-record produce() calls per second with linger.ms 0 and acks=all
  for BENCH_LIGHT_LOAD_DURATION_MS, latency from produce() to its delivery report, served by a thread in poll();
- group consumer: --readers processes of one new confluent-kafka group (classic protocol, range) reading the
  topic from the beginning, committing each consume() batch asynchronously, until the group committed every
  partition's end; the rate is over the fetch time (first records to the last commit), as the SDK's
  consume-group row;
- rebalance when a member joins: a confluent-kafka member joins a group of one that has been stable for
  BENCH_REBALANCE_STABLE_MS (1 s), from its creation until it owns its share (the SDK's rebalance_join_ms,
  consume-group row, is measured the same way).

The Kafka addresses come from the cluster's registry (`cluster status`'s kafka_address), so --bootstrap works too.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from raftbus.client import Admin, settings
from raftbus.client.reader import Reader

KAFKA_LINGER_MS = 5
QUEUED_RECORDS_MAX = 1_000_000  # librdkafka's local queue: produce() waits (poll) when it is full
# The consumers' fetch settings. librdkafka stops fetching a partition once its local queue holds
# queued.min.messages (100,000) and then waits fetch.queue.backoff.ms (1,000 ms by default) before it fetches it
# again, however soon the application drains the queue; a consumer that reads 100,000 records in well under a
# second sits idle for the rest (librdkafka's own advice: lower the backoff). docs/kafka.md, Figures.
CONSUMER_FETCH = {"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 8_388_608,
                  "queued.max.messages.kbytes": 262_144, "fetch.queue.backoff.ms": 10}
# consume() returns once it has its whole batch or its timeout has passed: a consumer that reads to a known end asks
# for no more than is left, and a group member, which does not know its share's end, waits briefly so that its last
# partial batch is not held back.
CONSUME_BATCH_RECORDS = 10_000
GROUP_CONSUME_WAIT_S = 0.02
# The light-load sender's report thread waits this long in poll(), which returns as soon as a report is served.
DELIVERY_POLL_S = 0.1
LIGHT_LOAD_FLUSH_S = 30  # how long the last reports may take once the sends end


def kafka_bootstrap(bootstrap: str) -> str:
    with Admin(bootstrap) as admin:
        addresses = [b.kafka_address for b in admin.cluster_status().brokers if b.kafka_address]
    if not addresses:
        raise RuntimeError("no broker of this cluster has a Kafka port (kafka_listen)")
    return ",".join(addresses)


def _producer(kafka: str, linger_ms: int):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": kafka, "acks": "all", "linger.ms": linger_ms,
                     "queue.buffering.max.messages": QUEUED_RECORDS_MAX, "queue.buffering.max.kbytes": 2_097_151,
                     "batch.size": 1_000_000})


def produce_load(spec, ready) -> dict:
    """spec.records produce() calls of spec.record_bytes each, round-robin over spec.partitions, then flush."""
    from raftbus.bench.runner import process_cpu_s

    producer = _producer(spec.bootstrap, spec.linger_ms)
    producer.list_topics(spec.topic, timeout=10)
    value = os.urandom(spec.record_bytes)
    partitions = spec.partitions
    ready()
    started_s, cpu_started_s = time.monotonic(), process_cpu_s()
    produce, poll = producer.produce, producer.poll
    count = len(partitions)
    for i in range(spec.records):
        while True:
            try:
                produce(spec.topic, value, partition=partitions[i % count])
                break
            except BufferError:
                poll(0.005)
    remaining = producer.flush(120)
    finished_s, cpu_s = time.monotonic(), process_cpu_s() - cpu_started_s
    if remaining:
        raise RuntimeError(f"{remaining} records not acknowledged within 120 s")
    return {"records": spec.records, "value_bytes": spec.records * spec.record_bytes, "started_s": started_s,
            "finished_s": finished_s, "cpu_s": cpu_s}


def consume_load(spec, ready) -> dict:
    """Every record of spec.partitions from offset 0 up to the high watermarks, through Consumer.consume."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": spec.bootstrap, "group.id": "raftbus-bench", "enable.auto.commit": False,
                         **CONSUMER_FETCH})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(spec.topic, p), timeout=10)[1] for p in spec.partitions}
    wanted = sum(ends.values())
    ready()
    started_s = time.monotonic()
    consumer.assign([TopicPartition(spec.topic, p, 0) for p in spec.partitions])
    records = value_bytes = 0
    while records < wanted:
        # consume() waits for its whole batch until its timeout: never ask for more than is left to read.
        for message in consumer.consume(min(CONSUME_BATCH_RECORDS, wanted - records), 1.0):
            if message.error() is None:
                records += 1
                value_bytes += len(message.value() or b"")
    finished_s = time.monotonic()
    consumer.close()
    return {"records": records, "value_bytes": value_bytes, "started_s": started_s, "finished_s": finished_s}


def light_load_latencies_ms(kafka: str, topic: str, record_bytes: int) -> list[float]:
    """Latency of each paced produce() to its delivery report. librdkafka hands a delivery report to the application
    only inside poll() or flush(), so a thread of its own polls while the sender sleeps between sends, as an
    application that waits for its acknowledgements does; polling only beside each produce() would time every report
    to the next send, rounding each latency up to a whole send interval."""
    from raftbus.bench.runner import paced

    producer = _producer(kafka, 0)
    producer.list_topics(topic, timeout=10)
    value = os.urandom(record_bytes)
    latencies_ms: list[float] = []
    count = settings.BENCH_LIGHT_LOAD_RATE_PER_S * settings.BENCH_LIGHT_LOAD_DURATION_MS // 1000
    sending = threading.Event()
    sending.set()

    def serve_reports() -> None:
        while sending.is_set():
            producer.poll(DELIVERY_POLL_S)
        deadline_s = time.monotonic() + LIGHT_LOAD_FLUSH_S
        while len(producer) and time.monotonic() < deadline_s:  # len(): records whose report is not yet served
            producer.poll(DELIVERY_POLL_S)

    poller = threading.Thread(target=serve_reports, name="kafka-delivery-reports", daemon=True)
    poller.start()
    try:
        for _ in paced(count, settings.BENCH_LIGHT_LOAD_RATE_PER_S):
            sent_s = time.perf_counter()
            producer.produce(topic, value, on_delivery=lambda err, _m, s=sent_s: err is None and latencies_ms.append(
                (time.perf_counter() - s) * 1000))
    finally:
        sending.clear()
        poller.join()
    producer.flush(LIGHT_LOAD_FLUSH_S)
    return latencies_ms


@dataclass(frozen=True)
class KafkaGroupLoad:
    """What one member process of the Kafka group run does."""

    kafka: str
    topic: str
    group: str
    end_offsets: tuple[int, ...]


def group_consume_load(spec: KafkaGroupLoad, ready) -> dict:
    """One member of a confluent-kafka group: consume, commit each batch asynchronously, until the group has
    committed every partition's end (checked when this member's consume() comes back empty)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": spec.kafka, "group.id": spec.group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", **CONSUMER_FETCH})
    everything = [TopicPartition(spec.topic, p) for p in range(len(spec.end_offsets))]
    records = value_bytes = commits = 0
    first_records_s = None
    ready()
    started_s = time.monotonic()
    consumer.subscribe([spec.topic])
    try:
        while True:
            batch = [m for m in consumer.consume(CONSUME_BATCH_RECORDS, GROUP_CONSUME_WAIT_S) if m.error() is None]
            if batch:
                if first_records_s is None:
                    first_records_s = time.monotonic()
                records += len(batch)
                value_bytes += sum(len(m.value() or b"") for m in batch)
                consumer.commit(asynchronous=True)
                commits += 1
                continue
            committed = consumer.committed(everything, timeout=10)
            if [tp.offset for tp in committed] == list(spec.end_offsets):
                break
        finished_s = time.monotonic()
    finally:
        consumer.close()
    return {"records": records, "value_bytes": value_bytes, "commits": commits, "started_s": started_s,
            "first_records_s": first_records_s if first_records_s is not None else finished_s,
            "finished_s": finished_s}


class _KafkaMember:
    """A confluent-kafka group member polling on a thread of its own; `owned` is its assignment."""

    def __init__(self, kafka: str, topic: str, group: str):
        self.owned: frozenset = frozenset()
        self.started_s = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(kafka, topic, group), daemon=True)
        self._thread.start()

    def _run(self, kafka: str, topic: str, group: str) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": kafka, "group.id": group, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest",
                             "heartbeat.interval.ms": settings.BENCH_GROUP_HEARTBEAT_INTERVAL_MS})

        def assigned(_consumer, partitions):
            self.owned = frozenset(p.partition for p in partitions)

        def revoked(_consumer, _partitions):
            self.owned = frozenset()

        consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
        while not self._stop.is_set():
            consumer.poll(0.05)
        consumer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)


def rebalance_join_ms(kafka: str, topic: str, partitions: int) -> float | None:
    """A confluent-kafka member joins a group of one, stable for BENCH_REBALANCE_STABLE_MS: from its creation until
    it owns its share."""
    from raftbus.bench.groups import _wait

    if partitions < 2:
        return None
    group = f"bench-kafka-rebalance-{time.time_ns() // 1_000_000}"
    timeout_s = settings.BENCH_REBALANCE_TIMEOUT_MS / 1000
    first = _KafkaMember(kafka, topic, group)
    members = [first]
    try:
        _wait(lambda: len(first.owned) == partitions, timeout_s, "the first Kafka member owning everything")
        time.sleep(settings.BENCH_REBALANCE_STABLE_MS / 1000)
        second = _KafkaMember(kafka, topic, group)
        members.append(second)
        joined_s = _wait(lambda: len(second.owned) >= partitions // 2 and not first.owned & second.owned,
                         timeout_s, "the joining Kafka member's share")
        return round((joined_s - second.started_s) * 1000, 1)
    finally:
        for member in members:
            member.close()


def bench_kafka(bootstrap: str, args, runner) -> dict:
    """The Kafka rows (module docstring); `runner` is raftbus.bench.runner (topics, workers, figures)."""
    kafka = kafka_bootstrap(bootstrap)
    stamp = time.time_ns() // 1_000_000
    topic, latency_topic = f"bench-kafka-{stamp}", f"bench-kafka-{stamp}-latency"
    brokers = runner.ensure_topic(bootstrap, latency_topic, args)
    runner.ensure_topic(bootstrap, topic, args)
    runner.wait_for_preferred_leaders(bootstrap, latency_topic, settings.BENCH_PREFERRED_LEADERS_TIMEOUT_MS / 1000)
    runner.progress(f"kafka light load: {settings.BENCH_LIGHT_LOAD_RATE_PER_S} produce()/s, linger.ms 0, acks=all")
    latencies_ms = light_load_latencies_ms(kafka, latency_topic, args.record_bytes)
    partitions = tuple(range(args.partitions))
    spec = runner.WorkerSpec(kafka, topic, partitions, args.records, args.record_bytes, KAFKA_LINGER_MS)
    runner.progress(f"kafka: producing {args.records} records with 1 confluent-kafka producer (linger.ms 5)")
    one = runner.run_workers(produce_load, [spec])
    records, _, elapsed_s = runner.combined(one)
    specs = [runner.WorkerSpec(kafka, topic, partitions, count, args.record_bytes, KAFKA_LINGER_MS)
             for count in runner.split_count(args.records, max(1, args.producers)) if count]
    runner.progress(f"kafka: producing {args.records} records with {len(specs)} producer processes")
    many = runner.run_workers(produce_load, specs)
    many_records, _, many_elapsed_s = runner.combined(many)
    readers = max(1, min(args.readers, args.partitions))
    runner.progress(f"kafka: reading {topic} with {readers} confluent-kafka consumer process(es)")
    read = runner.run_workers(consume_load, [runner.WorkerSpec(kafka, topic, partitions[i::readers])
                                             for i in range(readers)])
    read_records, _, read_elapsed_s = runner.combined(read)
    with Reader(bootstrap) as reader:
        ends = tuple(reader.offsets(topic, p)[1] for p in partitions)
    group_spec = KafkaGroupLoad(kafka, topic, f"bench-kafka-group-{stamp}", ends)
    runner.progress(f"kafka: reading {topic} with a confluent-kafka group of {readers} member process(es)")
    grouped = runner.run_workers(group_consume_load, [group_spec] * readers)
    group_s = max(r["finished_s"] for r in grouped) - min(r["first_records_s"] for r in grouped)
    runner.progress("kafka: a confluent-kafka member joining a stable group of one")
    join_ms = rebalance_join_ms(kafka, topic, args.partitions)
    return {"bench": "kafka", "records": records, "record_bytes": args.record_bytes,
            "producer_records_per_s": round(records / elapsed_s),
            "producer_cpu_us_per_record": round(one[0]["cpu_s"] * 1e6 / max(1, records), 2),
            "produce_processes": len(specs), "produce_processes_records_per_s": round(many_records / many_elapsed_s),
            "consumer_records_per_s": round(read_records / read_elapsed_s), "consumers": readers,
            "consumed_records": read_records,
            "group_consumer_records_per_s": round(sum(ends) / group_s), "group_members": readers,
            "group_records_polled": sum(r["records"] for r in grouped),
            "group_commits": sum(r["commits"] for r in grouped), "rebalance_join_ms": join_ms,
            "latency_p50_ms": runner.rounded_ms(runner.percentile(latencies_ms, 0.50)),
            "latency_p99_ms": runner.rounded_ms(runner.percentile(latencies_ms, 0.99)),
            "light_load_records": len(latencies_ms), "brokers": brokers, "partitions": args.partitions,
            "replication_factor": args.replication_factor, "linger_ms": KAFKA_LINGER_MS, "acks": "all",
            "topic": topic}
