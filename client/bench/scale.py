"""`raftbus bench scale` (part of `all`): how produce and consume cost grows with partitions and producers, one
JSON line (`"bench": "scale"`), each row bounded to BENCH_SCALE_RECORDS records (the producer rows to
BENCH_SCALE_PRODUCER_RECORDS) so `make bench` stays short.

In this order:
- send: a fresh topic of --partitions partitions written by --producers processes with `Producer.send` per
  record (keyless: sticky partitions, batches closed by `--linger-ms` or size), every future's result read:
  `send_records_per_s` and `send_producer_cpu_us_per_record`.
- producers: for each of BENCH_SCALE_PRODUCERS, a fresh topic of --partitions partitions written by that many
  processes with `Producer.send_batch`, each process giving every partition an equal share in batches of at most
  one share: `produce_producers{N}_records_per_s`.
- partitions: for each of BENCH_SCALE_PARTITIONS, a fresh topic (replication factor --replication-factor)
  written the same way by --producers processes (so all partitions carry load, and 300 partitions means 100×
  the batches of 3), then read from the beginning by --readers Reader processes (at most one per partition):
  `produce_p{N}_records_per_s`, `consume_p{N}_records_per_s`.
`--scale-partitions 3,300` runs only the partition rows of those counts. Each row's topic is deleted after it. A row that fails (say the cluster cannot give 300 new partitions a leader
within BENCH_SCALE_TOPIC_READY_TIMEOUT_MS) ends the workload with its error in `error`. The rows run on a fresh local cluster of their own (--brokers brokers,
as `failover` and `idle` do), whatever --bootstrap says.

Every produce is acknowledged only after its batch is committed on a majority of the partition's replicas and
applied on the leader, as in `bench produce`. Rates are wall-clock over all processes (first start to last
acknowledgement or last record read); `producer_cpu_us_per_record` beside each produce row is the producer
processes' own CPU (user + system) per record, which the machine's load disturbs less.
"""
from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace

from raftbus.client import settings
from raftbus.client.admin import Admin
from raftbus.bench import ops as bench_ops
from raftbus.client.errors import RaftbusError


def topic_name(kind: str, count: int) -> str:
    return f"bench-scale-{kind}{count}-{time.time_ns() // 1_000_000}"


def produce_row(runner, bootstrap: str, args, partitions: int, producers: int, topic: str,
                per_record: bool = False, records: int | None = None) -> dict:
    """Write `records` (BENCH_SCALE_RECORDS) records to a fresh `topic` of `partitions` partitions with `producers`
    processes (send_batch, every partition an equal share; or Producer.send per record with `per_record`)."""
    records = records or settings.BENCH_SCALE_RECORDS
    with Admin(bootstrap, topic_ready_timeout_ms=settings.BENCH_SCALE_TOPIC_READY_TIMEOUT_MS) as admin:
        admin.create_topic(topic, partitions=partitions, replication_factor=args.replication_factor)
    if not runner.wait_for_preferred_leaders(bootstrap, topic, settings.BENCH_SCALE_TOPIC_READY_TIMEOUT_MS / 1000):
        runner.progress(f"scale: leaders of {topic} did not settle on their preferred replicas; measuring anyway")
    shape = argparse.Namespace(**{**vars(args), "partitions": partitions, "producers": producers,
                                  "per_record": per_record})
    share = math.ceil(records / max(1, producers) / partitions)
    specs = [replace(spec, batch_records_max=share) for spec in runner.load_specs(bootstrap, topic, records, shape)]
    runner.progress(f"scale: {records} records to {partitions} partitions by {producers} producer process(es)"
                    f"{' with Producer.send per record' if per_record else ''}")
    results, broker_cpu_s = bench_ops.with_brokers_cpu(bootstrap, lambda: runner.run_workers(runner.produce_load,
                                                                                              specs))
    written, value_bytes, elapsed_s = runner.combined(results)
    return {"records": written, **runner.rate_figures(written, value_bytes, elapsed_s),
            "producer_cpu_us_per_record": round(sum(r["cpu_s"] for r in results) * 1e6 / max(1, written), 2),
            "broker_cpu_us_per_record": round(broker_cpu_s * 1e6 / max(1, written), 2)}


def consume_row(runner, bootstrap: str, args, partitions: int, topic: str) -> dict:
    """Read `topic` from the beginning with --readers Reader processes (at most one per partition)."""
    readers = max(1, min(args.readers, partitions))
    shares = [tuple(range(partitions))[i::readers] for i in range(readers)]
    runner.progress(f"scale: reading {topic} with {readers} reader process(es)")
    results = runner.run_workers(runner.consume_load, [runner.WorkerSpec(bootstrap, topic, s) for s in shares])
    read, value_bytes, elapsed_s = runner.combined(results)
    return {"records": read, **runner.rate_figures(read, value_bytes, elapsed_s)}


def delete_topic(bootstrap: str, topic: str) -> None:
    """Drop a row's topic, so the next rows (and later workloads of `all`) do not pay for its idle partitions."""
    with Admin(bootstrap) as admin:
        admin.delete_topic(topic)


def bench_scale(args, runner) -> dict:
    """The rows described in the module docstring, on a fresh cluster of their own (so 300 partitions load no other
    workload); `runner` is client/bench/runner.py (its workers and figures). A row that fails ends the workload:
    its error is reported beside the rows measured before it."""
    result: dict = {"bench": "scale", "records_per_row": settings.BENCH_SCALE_RECORDS,
                    "records_per_producer_row": settings.BENCH_SCALE_PRODUCER_RECORDS,
                    "record_bytes": args.record_bytes, "brokers": args.brokers,
                    "replication_factor": args.replication_factor, "rows": {}}
    with bench_ops.fresh_cluster(args.brokers, runner.progress) as cluster:
        try:
            measure_rows(cluster.bootstrap, args, runner, result)
        except RaftbusError as err:
            text = str(err)[:settings.BENCH_ERROR_TEXT_CHARS_MAX]
            runner.progress(f"scale: stopped after a failed row: {text}")
            result["error"] = text
    return result


def measure_rows(bootstrap: str, args, runner, result: dict) -> None:
    """Per-record send first, then the producer rows, then the partition rows from 3 to 300 (the most demanding
    last, so a cluster that cannot take it loses no other row); only the partition rows asked for with
    --scale-partitions."""
    chosen = getattr(args, "scale_partitions", None)
    if chosen is None:
        measure_producer_rows(bootstrap, args, runner, result)
    for partitions in chosen or settings.BENCH_SCALE_PARTITIONS:
        topic = topic_name("p", partitions)
        produced = produce_row(runner, bootstrap, args, partitions, args.producers, topic)
        consumed = consume_row(runner, bootstrap, args, partitions, topic)
        delete_topic(bootstrap, topic)
        result["rows"][f"p{partitions}"] = {"api": "send_batch", "partitions": partitions,
                                             "producers": args.producers, "produce": produced, "consume": consumed}
        result[f"produce_p{partitions}_records_per_s"] = produced["records_per_s"]
        result[f"consume_p{partitions}_records_per_s"] = consumed["records_per_s"]


def measure_producer_rows(bootstrap: str, args, runner, result: dict) -> None:
    """The per-record send row and the producer rows."""
    topic = topic_name("send", args.producers)
    produced = produce_row(runner, bootstrap, args, args.partitions, args.producers, topic, per_record=True)
    delete_topic(bootstrap, topic)
    result["rows"]["send"] = {"api": "send", "partitions": args.partitions, "producers": args.producers,
                              "produce": produced}
    result["send_records_per_s"] = produced["records_per_s"]
    result["send_producer_cpu_us_per_record"] = produced["producer_cpu_us_per_record"]
    result["send_broker_cpu_us_per_record"] = produced["broker_cpu_us_per_record"]
    for producers in settings.BENCH_SCALE_PRODUCERS:
        topic = topic_name("producers", producers)
        produced = produce_row(runner, bootstrap, args, args.partitions, producers, topic,
                               records=settings.BENCH_SCALE_PRODUCER_RECORDS)
        delete_topic(bootstrap, topic)
        result["rows"][f"producers{producers}"] = {"api": "send_batch", "partitions": args.partitions,
                                                   "producers": producers, "produce": produced}
        result[f"produce_producers{producers}_records_per_s"] = produced["records_per_s"]
