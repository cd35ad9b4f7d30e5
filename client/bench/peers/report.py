"""The side-by-side report: figures per system, raftbus / peer ratios, the Markdown table and the machine it ran on.

Everything here but `machine_figures` is pure (results in, rows or text out), so it is unit-tested.
"""
from __future__ import annotations

import os
import platform
from dataclasses import dataclass

SYSTEMS = ("raftbus", "nats", "redis")
PEERS = ("nats", "redis")
LABELS = {"raftbus": "raftbus", "nats": "NATS JetStream R3", "redis": "Redis Streams"}
SHORT_LABELS = {"nats": "NATS", "redis": "Redis"}
MISSING = "—"


@dataclass(frozen=True)
class Row:
    """One figure of the table: field `field` of the JSON line whose `bench` is `bench` (`raftbus_field` and
    `raftbus_bench` when raftbus names that figure differently, or measures it in another workload: the Kafka
    port's rows set beside the peers' own produce and consume)."""

    label: str
    bench: str
    field: str
    lower_is_better: bool = False
    raftbus_field: str | None = None
    raftbus_bench: str | None = None


ROWS = (
    Row("produce, records/s", "produce", "records_per_s"),
    Row("produce, MB/s", "produce", "mb_per_s"),
    Row("consume, records/s", "consume", "records_per_s"),
    Row("consume, MB/s", "consume", "mb_per_s"),
    Row("queue, lease + ack per message, messages/s", "queue", "records_per_s", raftbus_field="lease_ack_per_s"),
    Row("light-load produce latency p50, ms", "produce", "latency_p50_ms", lower_is_better=True),
    Row("light-load produce latency p99, ms", "produce", "latency_p99_ms", lower_is_better=True),
    Row("leader kill -9 to next acknowledged produce, ms", "failover", "failover_ms", lower_is_better=True,
        raftbus_field="failover_p50_ms"),
    Row("key-value get of random keys, one call in flight per process, gets/s", "kv", "gets_per_s"),
    Row("key-value get latency p50, ms", "kv", "get_p50_ms", lower_is_better=True),
    Row("key-value get latency p99, ms", "kv", "get_p99_ms", lower_is_better=True),
    Row("key-value compare-and-set put, one in flight per process, puts/s", "kv", "cas_puts_per_s"),
    Row("Kafka port: confluent-kafka producer (linger.ms 5, acks=all), records/s", "produce", "records_per_s",
        raftbus_bench="kafka", raftbus_field="producer_records_per_s"),
    Row("Kafka port: confluent-kafka consumer, records/s", "consume", "records_per_s", raftbus_bench="kafka",
        raftbus_field="consumer_records_per_s"),
    Row("Kafka port: light-load produce latency p50 (linger.ms 0, acks=all), ms", "produce", "latency_p50_ms",
        lower_is_better=True, raftbus_bench="kafka", raftbus_field="latency_p50_ms"),
    Row("Kafka port: light-load produce latency p99, ms", "produce", "latency_p99_ms", lower_is_better=True,
        raftbus_bench="kafka", raftbus_field="latency_p99_ms"),
)


def by_system(lines: list[dict]) -> dict[str, dict[str, dict]]:
    """{system: {bench: line}} from the JSON lines of every system."""
    results: dict[str, dict[str, dict]] = {}
    for line in lines:
        results.setdefault(line["system"], {})[line["bench"]] = line
    return results


def figure(results: dict[str, dict[str, dict]], system: str, row: Row) -> float | None:
    field = row.raftbus_field if system == "raftbus" and row.raftbus_field else row.field
    bench = row.raftbus_bench if system == "raftbus" and row.raftbus_bench else row.bench
    value = results.get(system, {}).get(bench, {}).get(field)
    return None if value is None else float(value)


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """raftbus / peer; None when either figure is missing or the peer's is zero."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs


def table_rows(results: dict[str, dict[str, dict]]) -> list[dict]:
    """One dict per Row: the label, each system's figure and raftbus / peer for each peer."""
    rows = []
    for row in ROWS:
        values = {system: figure(results, system, row) for system in SYSTEMS}
        rows.append({"figure": row.label, "bench": row.bench, "field": row.field,
                     "lower_is_better": row.lower_is_better, **values,
                     **{f"raftbus_over_{peer}": ratio(values["raftbus"], values[peer]) for peer in PEERS}})
    return rows


def format_figure(value: float | None) -> str:
    if value is None:
        return MISSING
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def format_ratio(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}×"


def markdown_table(rows: list[dict]) -> str:
    header = ["figure", LABELS["raftbus"]]
    for peer in PEERS:
        header += [LABELS[peer], f"raftbus / {SHORT_LABELS[peer]}"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for row in rows:
        cells = [row["figure"], format_figure(row["raftbus"])]
        for peer in PEERS:
            cells += [format_figure(row[peer]), format_ratio(row[f"raftbus_over_{peer}"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_model(cpuinfo: str) -> str:
    """The first `model name` of /proc/cpuinfo text ("unknown" when there is none)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return "unknown"


def machine_figures() -> dict:
    """Cores, CPU model, Python, OS and the load average when the run started (the machine may be shared)."""
    try:
        with open("/proc/cpuinfo") as f:
            model = cpu_model(f.read())
    except OSError:
        model = platform.processor() or "unknown"
    return {"cores": os.cpu_count(), "cpu_model": model, "python": platform.python_version(),
            "os": f"{platform.system()} {platform.release()}",
            "load_average_1m_at_start": round(os.getloadavg()[0], 2)}


def servers_summary(results: dict[str, dict[str, dict]]) -> list[str]:
    """One line per system: servers, replication, durability, versions (from its produce line)."""
    lines = []
    for system in SYSTEMS:
        line = results.get(system, {}).get("produce")
        if line is None:
            continue
        if system == "raftbus":
            lines.append(f"- raftbus: {line.get('brokers')} brokers, replication factor {line.get('replication_factor')},"
                         f" acknowledged after a majority commit (page cache; group-commit fsync, window p99 "
                         f"{line.get('durability_window_p99_ms')} ms)")
        else:
            lines.append(f"- {LABELS[system]}: {line['server_version']}, {line['servers']} server(s), "
                         f"{line['durability']}; client {line['client']}")
    return lines


def report_markdown(document: dict) -> str:
    """The whole report: machine, command, settings, servers, the table and how to read it."""
    machine, run = document["machine"], document["settings"]
    results = document["results"]
    parts = [
        f"Machine: {machine['cores']} cores, {machine['cpu_model']}, Python {machine['python']}, {machine['os']}; "
        f"1-minute load average {machine['load_average_1m_at_start']} at start (shared machine: other work may run).",
        f"Command: `{document['command']}` (raftbus part: `{document['raftbus_command']}`).",
        f"Workload: {run['record_bytes']}-byte records; produce and consume {run['records']:,} records over "
        f"{run['partitions']} partitions with {run['producers']} producer and {run['readers']} reader processes; "
        f"queue {run['queue_records']:,} messages; key-value {run.get('kv_keys', 0):,} keys of the same size, "
        f"gets by the reader processes, compare-and-set puts by the producer processes; everything on loopback.",
        *servers_summary(results),
        "",
        markdown_table(document["rows"]),
        "",
        f"Ratios are raftbus / peer: above 1 favours raftbus for rates, below 1 favours raftbus for the ms rows. "
        f"{MISSING}: not measured (Redis' single node has no failover; its key-value rows are not measured).",
    ]
    for error in document.get("errors", []):
        parts.append(f"FAILED: {error['system']}: {error['error']}")
    return "\n".join(parts)
