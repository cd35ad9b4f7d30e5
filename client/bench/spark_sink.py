"""The sink half of `raftbus bench spark`: records/s written by the raftbus sink, next to the source's.

  sink_records_per_s        one availableNow micro-batch reading the benchmark topic with the raftbus source
                            and writing every record to a fresh topic with the raftbus sink (exactly-once
                            streaming path), records over Spark's batchDuration
  batch_write_records_per_s spark.read of the topic → df.write.format("raftbus") into a fresh topic (wall time)
Both write key and value as read, to a topic of the same partitions and replication factor; every write is
acknowledged after a majority commit. Each figure is the best of the rounds; every sink topic is checked to
hold exactly the records read, then deleted.
"""
from __future__ import annotations

import os
import time
import uuid

BENCH_SPARK_SINK_QUERY_TIMEOUT_MS = 600_000


def _sink_topic(bootstrap: str, args) -> str:
    from raftbus.client import Admin

    name = f"bench-spark-sink-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap) as admin:
        admin.create_topic(name, partitions=args.partitions, replication_factor=args.replication_factor)
    return name


def _held_and_drop(bootstrap: str, topic: str, expected: int) -> None:
    from raftbus.client import Admin, Reader

    with Reader(bootstrap) as reader:
        held = sum(hw - start for start, hw in (reader.offsets(topic, p) for p in range(reader.partitions(topic))))
    with Admin(bootstrap) as admin:
        admin.delete_topic(topic)
    if held != expected:
        raise AssertionError(f"the sink wrote {held} records to {topic}, expected {expected}")


def one_sink_micro_batch(spark, bootstrap: str, source: str, args, checkpoint_dir: str) -> dict:
    """One availableNow micro-batch source → raftbus sink; its rows and Spark's batchDuration."""
    sink = _sink_topic(bootstrap, args)
    query = (spark.readStream.format("raftbus").option("bootstrap", bootstrap).option("subscribe", source)
             .option("startingOffsets", "earliest").load().select("key", "value")
             .writeStream.format("raftbus").option("bootstrap", bootstrap).option("topic", sink)
             .option("checkpointLocation", checkpoint_dir).trigger(availableNow=True).start())
    if not query.awaitTermination(BENCH_SPARK_SINK_QUERY_TIMEOUT_MS / 1000):
        query.stop()
        raise TimeoutError(f"the sink micro-batch did not finish within {BENCH_SPARK_SINK_QUERY_TIMEOUT_MS} ms")
    if query.exception() is not None:
        raise RuntimeError(f"the sink micro-batch failed: {query.exception()}")
    batches = [p for p in query.recentProgress if p.numInputRows > 0]
    rows = sum(p.numInputRows for p in batches)
    _held_and_drop(bootstrap, sink, rows)
    return {"rows": rows, "batch_s": sum(p.batchDuration for p in batches) / 1000}


def one_batch_write(spark, bootstrap: str, source: str, args, rows: int) -> float:
    """Seconds for spark.read of the topic → df.write into a fresh topic."""
    sink = _sink_topic(bootstrap, args)
    started_s = time.monotonic()
    (spark.read.format("raftbus").option("bootstrap", bootstrap).option("subscribe", source).load()
     .select("key", "value").write.format("raftbus").mode("append").option("bootstrap", bootstrap)
     .option("topic", sink).save())
    elapsed_s = time.monotonic() - started_s
    _held_and_drop(bootstrap, sink, rows)
    return elapsed_s


def bench_sink(spark, bootstrap: str, topic: str, args, scratch: str, rounds: int, progress) -> dict:
    """The sink figures (see the module docstring)."""
    streamed = [one_sink_micro_batch(spark, bootstrap, topic, args, os.path.join(scratch, f"sink-{n}"))
                for n in range(rounds)]
    best = min(streamed, key=lambda b: b["batch_s"])
    progress(f"sink micro-batches: {[b['batch_s'] for b in streamed]} s")
    written_s = min(one_batch_write(spark, bootstrap, topic, args, best["rows"]) for _ in range(rounds))
    progress(f"batch write: {written_s:.3f} s")
    return {"sink_records_per_s": round(best["rows"] / max(best["batch_s"], 1e-9)),
            "sink_batch_s": round(best["batch_s"], 3),
            "batch_write_records_per_s": round(best["rows"] / written_s)}
