"""The table `make bench` writes: every figure `raftbus bench all` measured, beside its target (PRODUCT §6).

Pure: results in, Markdown out (the machine description is passed in), so it is unit-tested.
"""
from __future__ import annotations

from dataclasses import dataclass

MISSING = "—"


@dataclass(frozen=True)
class Figure:
    label: str
    bench: str
    field: str
    target: float | None = None  # None: reported, no target
    at_most: bool = False  # the target is a maximum (latencies, times, CPU)
    unit: str = ""


FIGURES = (
    Figure("produce, 100-byte records, acked after majority commit", "produce", "records_per_s", 500_000,
           unit="records/s"),
    Figure("  produce: CPU per record of the 3 brokers together (user + system)", "produce",
           "broker_cpu_us_per_record", unit="µs"),
    Figure("produce, Producer.send per record, --producers processes (2), acked after majority commit", "scale",
           "send_records_per_s", 250_000, unit="records/s"),
    Figure("  its producer CPU per record (all threads, user + system)", "scale", "send_producer_cpu_us_per_record",
           unit="µs"),
    Figure("  its CPU per record of the 3 brokers together (user + system)", "scale",
           "send_broker_cpu_us_per_record", unit="µs"),
    *(Figure(f"scale: produce (send_batch), {n} partitions", "scale", f"produce_p{n}_records_per_s",
             unit="records/s") for n in (3, 30, 300)),
    *(Figure(f"scale: consume (Reader), {n} partitions", "scale", f"consume_p{n}_records_per_s", unit="records/s")
      for n in (3, 30, 300)),
    *(Figure(f"scale: produce (send_batch), {n} producer process{'es' if n > 1 else ''}", "scale",
             f"produce_producers{n}_records_per_s", unit="records/s") for n in (1, 4, 16)),
    Figure("consume with a consumer group, committing per batch", "consume-group", "records_per_s", 1_000_000,
           unit="records/s"),
    Figure("consume by offset (Reader), decoding every record", "consume", "records_per_s", unit="records/s"),
    Figure("queue, lease + ack per message, priority ordering", "queue", "lease_ack_per_s", 50_000,
           unit="messages/s"),
    Figure("queue, enqueue with Producer.send per message, --producers processes (2)", "queue", "enqueue_per_s",
           unit="messages/s"),
    Figure("  enqueue: CPU per message of the 3 brokers together", "queue", "enqueue_broker_cpu_us_per_message",
           unit="µs"),
    Figure("  enqueue: CPU per message of the producing processes", "queue", "enqueue_client_cpu_us_per_message",
           unit="µs"),
    Figure("light-load produce latency p50 (1,000 sends/s)", "produce", "latency_p50_ms", 2, at_most=True,
           unit="ms"),
    Figure("light-load produce latency p99", "produce", "latency_p99_ms", 10, at_most=True, unit="ms"),
    Figure("  light load: CPU per record of the 3 brokers together", "produce", "light_load_broker_cpu_us_per_record",
           unit="µs"),
    Figure("  light load: CPU per record of the producing process", "produce",
           "light_load_producer_cpu_us_per_record", unit="µs"),
    Figure("leader kill -9 to next acknowledged produce, p50", "failover", "failover_p50_ms", 2_000, at_most=True,
           unit="ms"),
    Figure("leader kill -9 to next acknowledged produce, max", "failover", "failover_max_ms", 2_000, at_most=True,
           unit="ms"),
    Figure("acknowledged records lost over the kills", "failover", "acked_lost", 0, at_most=True),
    Figure("Kafka port: group coordinator kill -9 to the next committed offset (confluent-kafka), p50", "failover",
           "group_coordinator_failover_p50_ms", unit="ms"),
    Figure("idle: 100 partitions on 3 brokers, CPU of the busiest broker", "idle", "idle_cpu_percent_max", 5,
           at_most=True, unit="% of a core"),
    Figure("asyncio: AsyncProducer.send per record, awaited by 500 tasks per process, acked", "aio",
           "send_records_per_s", unit="records/s"),
    Figure("asyncio: AsyncProducer.send_batch, acked after majority commit", "aio", "send_batch_records_per_s",
           unit="records/s"),
    Figure("asyncio: AsyncConsumer (one member), decoding, committing per poll", "aio", "consume_records_per_s",
           unit="records/s"),
    Figure("asyncio: AsyncReader (one process, no group), decoding every record", "aio", "reader_records_per_s",
           unit="records/s"),
    Figure("asyncio: light-load AsyncProducer.send latency p50 (1,000 sends/s)", "aio", "latency_p50_ms", unit="ms"),
    Figure("asyncio: light-load AsyncProducer.send latency p99", "aio", "latency_p99_ms", unit="ms"),
    Figure("Kafka port: confluent-kafka producer, acks=all, linger.ms 5, one process", "kafka",
           "producer_records_per_s", unit="records/s"),
    Figure("Kafka port: confluent-kafka produce() per record, --producers processes (2), acks=all", "kafka",
           "produce_processes_records_per_s", 400_000, unit="records/s"),
    Figure("Kafka port: confluent-kafka consumer, --readers processes", "kafka", "consumer_records_per_s", 1_000_000,
           unit="records/s"),
    Figure("Kafka port: light-load produce latency p50 (1,000 sends/s, linger.ms 0, acks=all)", "kafka",
           "latency_p50_ms", unit="ms"),
    Figure("Kafka port: light-load produce latency p99", "kafka", "latency_p99_ms", unit="ms"),
    Figure("Kafka port: confluent-kafka group of --readers members, committing per batch (compare: consume "
           "with a consumer group)", "kafka", "group_consumer_records_per_s", unit="records/s"),
    Figure("Kafka port: group rebalance when a confluent-kafka member joins (compare: group rebalance)",
           "kafka", "rebalance_join_ms", unit="ms"),
    Figure("table: Table.get of random keys (linearizable), --readers processes (3), one call in flight each", "kv",
           "gets_per_s", unit="gets/s"),
    Figure("  Table.get latency p50", "kv", "get_p50_ms", unit="ms"),
    Figure("  Table.get latency p99", "kv", "get_p99_ms", unit="ms"),
    Figure("table: Table.put with expected_revision (compare-and-set), --producers processes (2), acked", "kv",
           "cas_puts_per_s", unit="puts/s"),
    Figure("compaction: stored log read per second of a compactor's pass", "kv", "compaction_mb_per_s", unit="MB/s"),
    Figure("  produce throughput while a pass runs / without (full load)", "kv", "produce_during_compaction_ratio",
           unit="×"),
    Figure("  light-load produce latency p99 without a pass (200 sends/s)", "kv",
           "produce_latency_p99_ms_without_compaction", unit="ms"),
    Figure("  light-load produce latency p99 while a pass runs", "kv", "produce_latency_p99_ms_during_compaction",
           unit="ms"),
    Figure("  light-load produce latency max while a pass runs", "kv", "produce_latency_max_ms_during_compaction",
           unit="ms"),
    Figure("  light-load fetch latency p99 without a pass (200 fetches/s)", "kv",
           "fetch_latency_p99_ms_without_compaction", unit="ms"),
    Figure("  light-load fetch latency p99 while a pass runs", "kv", "fetch_latency_p99_ms_during_compaction",
           unit="ms"),
    Figure("group rebalance when a member joins", "consume-group", "rebalance_join_ms", unit="ms"),
    Figure("delayed delivery lateness p99", "queue", "lateness_p99_ms", unit="ms"),
    Figure("durability window p99 (ack to fsync, group commit)", "produce", "durability_window_p99_ms", unit="ms"),
    Figure("broker RSS after the produce load, max", "produce", "broker_rss_mb_max", unit="MB"),
)


def value_of(results: dict[str, dict], figure: Figure) -> float | None:
    value = results.get(figure.bench, {}).get(figure.field)
    return None if value is None else float(value)


def verdict(figure: Figure, value: float | None) -> str:
    if figure.target is None or value is None:
        return ""
    met = value <= figure.target if figure.at_most else value >= figure.target
    return "met" if met else "missed"


def fmt(value: float | None) -> str:
    if value is None:
        return MISSING
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def target_text(figure: Figure) -> str:
    if figure.target is None:
        return ""
    return f"{'≤' if figure.at_most else '≥'} {fmt(figure.target)}"


def markdown(results: dict[str, dict], machine: str, command: str) -> str:
    """The table, with the machine and the command that produced it."""
    lines = [f"Machine: {machine}. Command: `{command}`.", "",
             "| figure | measured | unit | target | |", "|---|---:|---|---|---|"]
    for figure in FIGURES:
        value = value_of(results, figure)
        lines.append(f"| {figure.label} | {fmt(value)} | {figure.unit} | {target_text(figure)} | "
                     f"{verdict(figure, value)} |")
    return "\n".join(lines) + "\n"
