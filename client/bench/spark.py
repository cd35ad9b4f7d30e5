"""`raftbus bench spark`: records/s through one Structured Streaming micro-batch of the raftbus source.

Fills a topic with `records` records (or reuses one holding them), starts a local[2] Spark session on
loopback, warms its Python workers up with a small batch read, then runs one availableNow query per output
path into Spark's `noop` sink (every row is produced and handed to the JVM, nothing is written):
  records_per_s          Arrow record batches (the default), records over the micro-batch's duration
  tuples_records_per_s   the same batch with useArrow=false (PySpark converts plain tuples itself)
  arrow_speedup          records_per_s / tuples_records_per_s
  batch_read_records_per_s, batch_read_tuples_records_per_s
                         the same records through spark.read into the noop sink (wall time of the write)
  sink_records_per_s, sink_batch_s, batch_write_records_per_s
                         the raftbus sink writing the same records to another topic (bench_sink.py)
Each micro-batch duration is Spark's own batchDuration (planning, reading every partition, the sink); every
figure is the best of BENCH_SPARK_ROUNDS rounds.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

BENCH_SPARK_MASTER = "local[2]"
BENCH_SPARK_QUERY_TIMEOUT_MS = 600_000
# Each measurement is taken this many times, Arrow and tuples alternating, and the fastest counts (the
# machine is shared, so the slower rounds mostly measure other work).
BENCH_SPARK_ROUNDS = 2


def local_session():
    """The benchmark's Spark session: local[2], no UI, loopback only, workers on this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(BENCH_SPARK_MASTER).appName("raftbus-bench-spark")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def one_micro_batch(spark, bootstrap: str, topic: str, use_arrow: bool, checkpoint_dir: str) -> dict:
    """Run one availableNow micro-batch over the whole topic into the noop sink; its rows and duration."""
    query = (spark.readStream.format("raftbus").option("bootstrap", bootstrap).option("subscribe", topic)
             .option("startingOffsets", "earliest").option("useArrow", str(use_arrow).lower()).load()
             .writeStream.format("noop").option("checkpointLocation", checkpoint_dir)
             .trigger(availableNow=True).start())
    started_s = time.monotonic()
    if not query.awaitTermination(BENCH_SPARK_QUERY_TIMEOUT_MS / 1000):
        query.stop()
        raise TimeoutError(f"the micro-batch did not finish within {BENCH_SPARK_QUERY_TIMEOUT_MS} ms")
    wall_s = time.monotonic() - started_s
    batches = [p for p in query.recentProgress if p.numInputRows > 0]
    rows = sum(p.numInputRows for p in batches)
    batch_s = sum(p.batchDuration for p in batches) / 1000
    return {"rows": rows, "batches": len(batches), "batch_s": batch_s, "wall_s": wall_s}


def warm_up(spark, bootstrap: str, topic: str) -> None:
    """Start Spark's Python workers with a batch read of the first few records of every partition."""
    from raftbus.client.reader import Reader

    with Reader(bootstrap) as reader:
        ends = {str(p): min(reader.offsets(topic, p)[1], 10) for p in range(reader.partitions(topic))}
    (spark.read.format("raftbus").option("bootstrap", bootstrap).option("subscribe", topic)
     .option("endingOffsets", json.dumps({topic: ends})).load().collect())


def one_batch_read(spark, bootstrap: str, topic: str, use_arrow: bool) -> float:
    """Seconds to read the whole topic with spark.read into the noop sink."""
    started_s = time.monotonic()
    (spark.read.format("raftbus").option("bootstrap", bootstrap).option("subscribe", topic)
     .option("useArrow", str(use_arrow).lower()).load().write.format("noop").mode("overwrite").save())
    return time.monotonic() - started_s


def bench_spark(bootstrap: str, args, fill_topic: Callable[[str, str, object], int],
                progress: Callable[[str], None]) -> dict:
    """The `spark` workload of raftbus bench (fill_topic and progress come from client.bench)."""
    from raftbus.client import spark as raftbus_spark
    from raftbus.bench.spark_sink import bench_sink

    topic = f"bench-spark-{args.records}x{args.record_bytes}-p{args.partitions}"
    brokers = fill_topic(bootstrap, topic, args)
    progress(f"starting Spark ({BENCH_SPARK_MASTER}) for one micro-batch over {topic}")
    spark = local_session()
    scratch = tempfile.mkdtemp(prefix="raftbus-bench-spark-")
    try:
        raftbus_spark.register(spark)
        warm_up(spark, bootstrap, topic)
        rounds = [{use_arrow: one_micro_batch(spark, bootstrap, topic, use_arrow,
                                              os.path.join(scratch, f"{use_arrow}-{n}"))
                   for use_arrow in (True, False)} for n in range(BENCH_SPARK_ROUNDS)]
        arrow = min((r[True] for r in rounds), key=lambda b: b["batch_s"])
        tuples = min((r[False] for r in rounds), key=lambda b: b["batch_s"])
        progress(f"micro-batches (arrow, tuples): {[(r[True]['batch_s'], r[False]['batch_s']) for r in rounds]}")
        batch_read_s = {use_arrow: min(one_batch_read(spark, bootstrap, topic, use_arrow)
                                       for _ in range(BENCH_SPARK_ROUNDS)) for use_arrow in (True, False)}
        progress(f"batch reads (arrow, tuples): {batch_read_s[True]:.3f} s, {batch_read_s[False]:.3f} s")
        sink = bench_sink(spark, bootstrap, topic, args, scratch, BENCH_SPARK_ROUNDS, progress)
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    arrow_rate = arrow["rows"] / max(arrow["batch_s"], 1e-9)
    tuples_rate = tuples["rows"] / max(tuples["batch_s"], 1e-9)
    return {"bench": "spark", "records": arrow["rows"], "record_bytes": args.record_bytes,
            "records_per_s": round(arrow_rate), "batch_s": round(arrow["batch_s"], 3),
            "micro_batches": arrow["batches"], "tuples_records_per_s": round(tuples_rate),
            "tuples_batch_s": round(tuples["batch_s"], 3), "arrow_speedup": round(arrow_rate / tuples_rate, 2),
            "batch_read_records_per_s": round(arrow["rows"] / batch_read_s[True]),
            "batch_read_tuples_records_per_s": round(arrow["rows"] / batch_read_s[False]), **sink,
            "rounds": BENCH_SPARK_ROUNDS, "spark_master": BENCH_SPARK_MASTER, "brokers": brokers,
            "partitions": args.partitions, "replication_factor": args.replication_factor, "topic": topic}
