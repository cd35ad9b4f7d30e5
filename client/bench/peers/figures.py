"""Figures shared by the peers' workloads, in the field names `raftbus bench` uses."""
from __future__ import annotations

from raftbus.bench.runner import combined, percentile, rate_figures, rounded_ms, split_count
from raftbus.client.errors import InternalError


def load_result(records: int, value_bytes: int, started_s: float, finished_s: float, **extra) -> dict:
    """What one load process reports (the shape `bench.combined` adds up)."""
    return {"records": records, "value_bytes": value_bytes, "started_s": started_s, "finished_s": finished_s, **extra}


def throughput_line(bench: str, system: str, results: list[dict], record_bytes: int, **extra) -> dict:
    """One JSON line: records, records_per_s and mb_per_s over all load processes."""
    records, value_bytes, elapsed_s = combined(results)
    return {"bench": bench, "system": system, "records": records, "record_bytes": record_bytes,
            **rate_figures(records, value_bytes, elapsed_s), **extra}


def latency_figures(latencies_ms: list[float], rate_per_s: int) -> dict:
    return {"latency_p50_ms": rounded_ms(percentile(latencies_ms, 0.50)),
            "latency_p99_ms": rounded_ms(percentile(latencies_ms, 0.99)),
            "light_load_rate_per_s": rate_per_s, "light_load_records": len(latencies_ms)}


def check_count(what: str, expected: int, got: int) -> None:
    """A workload that moved another number of records than asked is a failure, not a figure."""
    if got != expected:
        raise InternalError(f"{what}: expected {expected} records, got {got}")


def shares(items: list, parts: int) -> list[tuple]:
    """`items` dealt round-robin into at most `parts` non-empty tuples (partitions per reader process)."""
    parts = max(1, min(parts, len(items)))
    return [tuple(items[i::parts]) for i in range(parts)]


def producer_counts(records: int, producers: int) -> list[int]:
    return [count for count in split_count(records, max(1, producers)) if count]
