"""`raftbus bench kafka` (and part of `all`): the Kafka port driven by confluent-kafka (librdkafka), on the same
cluster and in the same run as the SDK's rows, so the table shows them side by side.

- producer: one process, acks=all (a majority commit), 100-byte records, linger.ms 5, produce() per record;
- per-record produce() with --producers processes (2);
- consumer: --readers processes reading the topic from the beginning (assign, no group), every record handed
  to Python;
- light load: BENCH_LIGHT_LOAD_RATE_PER_S single-record produce() calls per second with linger.ms 0 and acks=all
  for BENCH_LIGHT_LOAD_DURATION_MS, latency from produce() to its delivery report.

The Kafka addresses come from the cluster's registry (`cluster status`'s kafka_address), so --bootstrap works too.
"""
from __future__ import annotations

import os
import time

from raftbus.client import Admin, settings

KAFKA_LINGER_MS = 5
QUEUED_RECORDS_MAX = 1_000_000  # librdkafka's local queue: produce() waits (poll) when it is full


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
                         "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 8_388_608,
                         "queued.max.messages.kbytes": 262_144})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(spec.topic, p), timeout=10)[1] for p in spec.partitions}
    wanted = sum(ends.values())
    ready()
    started_s = time.monotonic()
    consumer.assign([TopicPartition(spec.topic, p, 0) for p in spec.partitions])
    records = value_bytes = 0
    while records < wanted:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                records += 1
                value_bytes += len(message.value() or b"")
    finished_s = time.monotonic()
    consumer.close()
    return {"records": records, "value_bytes": value_bytes, "started_s": started_s, "finished_s": finished_s}


def light_load_latencies_ms(kafka: str, topic: str, record_bytes: int) -> list[float]:
    from raftbus.bench.runner import paced

    producer = _producer(kafka, 0)
    producer.list_topics(topic, timeout=10)
    value = os.urandom(record_bytes)
    latencies_ms: list[float] = []
    count = settings.BENCH_LIGHT_LOAD_RATE_PER_S * settings.BENCH_LIGHT_LOAD_DURATION_MS // 1000
    for _ in paced(count, settings.BENCH_LIGHT_LOAD_RATE_PER_S):
        sent_s = time.perf_counter()
        producer.produce(topic, value, on_delivery=lambda err, _m, s=sent_s: err is None and latencies_ms.append(
            (time.perf_counter() - s) * 1000))
        producer.poll(0)
    producer.flush(30)
    return latencies_ms


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
    return {"bench": "kafka", "records": records, "record_bytes": args.record_bytes,
            "producer_records_per_s": round(records / elapsed_s),
            "producer_cpu_us_per_record": round(one[0]["cpu_s"] * 1e6 / max(1, records), 2),
            "produce_processes": len(specs), "produce_processes_records_per_s": round(many_records / many_elapsed_s),
            "consumer_records_per_s": round(read_records / read_elapsed_s), "consumers": readers,
            "consumed_records": read_records,
            "latency_p50_ms": runner.rounded_ms(runner.percentile(latencies_ms, 0.50)),
            "latency_p99_ms": runner.rounded_ms(runner.percentile(latencies_ms, 0.99)),
            "light_load_records": len(latencies_ms), "brokers": brokers, "partitions": args.partitions,
            "replication_factor": args.replication_factor, "linger_ms": KAFKA_LINGER_MS, "acks": "all",
            "topic": topic}
