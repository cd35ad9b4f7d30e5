"""Spark tier: Structured Streaming from raftbus with checkpoints, restarts, rate limits and availableNow."""
from __future__ import annotations

import threading

import pytest
from pyspark.errors import StreamingQueryException

from raftbus.client import Admin, Producer, Reader
from tests.helpers import wait_until
from tests.spark.support import (
    QUERY_TIMEOUT_S,
    BatchLog,
    assert_exactly_once,
    create_topic,
    produce,
    stored_records,
    stream,
    wait_for_query,
)


def test_restarted_query_resumes_without_duplicates_or_gaps(spark, spark_cluster, tmp_path):
    """A query streaming into parquet with a checkpoint, stopped and restarted after more records were
    appended, ends up with every record exactly once."""
    create_topic(spark_cluster, "resume", partitions=2)
    produce(spark_cluster, "resume", {0: 120, 1: 80})
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run_until(count: int) -> None:
        query = (stream(spark, spark_cluster, "resume").select("partition", "offset", "value")
                 .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
                 .trigger(processingTime="200 milliseconds").start())
        try:
            wait_for_query(query, lambda: spark.read.parquet(out).count() >= count,
                           what=f"{count} records in the parquet sink")
        finally:
            query.stop()

    run_until(200)
    produce(spark_cluster, "resume", {0: 30, 1: 50}, first=200)
    run_until(280)
    assert_exactly_once(spark.read.parquet(out).collect(), stored_records(spark_cluster, "resume"))


def test_crash_between_batches_rereads_the_same_range(spark, spark_cluster, tmp_path):
    """A query that fails after batch 1 was planned (its offsets logged) but before its sink committed
    re-reads exactly the same records as batch 1 on restart, even though more were appended meanwhile."""
    create_topic(spark_cluster, "crash", partitions=2)
    produce(spark_cluster, "crash", {0: 60, 1: 40})
    checkpoint = str(tmp_path / "checkpoint")
    first_run = BatchLog()

    def crash_in_batch_1(df, batch_id):
        first_run(df, batch_id)
        if batch_id == 1:
            raise RuntimeError("crash before the sink commit of batch 1")

    query = (stream(spark, spark_cluster, "crash", maxOffsetsPerTrigger=30).writeStream
             .foreachBatch(crash_in_batch_1).option("checkpointLocation", checkpoint).start())
    with pytest.raises(StreamingQueryException, match="crash before the sink commit"):
        query.awaitTermination(QUERY_TIMEOUT_S)
    produce(spark_cluster, "crash", {0: 10, 1: 10}, first=100)

    second_run = BatchLog()
    query = (stream(spark, spark_cluster, "crash", maxOffsetsPerTrigger=30).writeStream
             .foreachBatch(second_run).option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert [batch_id for batch_id, _ in first_run.batches] == [0, 1]
    assert second_run.batches[0] == first_run.batches[1]
    assert_exactly_once(first_run.batches[0][1] + second_run.rows, stored_records(spark_cluster, "crash"))


def test_max_offsets_per_trigger_splits_by_lag_and_starves_no_partition(spark, spark_cluster, tmp_path):
    """With maxOffsetsPerTrigger every micro-batch reads at most the budget, every partition that still
    has records gets some in every batch, and all records arrive exactly once."""
    create_topic(spark_cluster, "rate", partitions=3)
    counts = {0: 120, 1: 30, 2: 3}
    produce(spark_cluster, "rate", counts)
    budget = 40
    log = BatchLog()
    query = (stream(spark, spark_cluster, "rate", maxOffsetsPerTrigger=budget).writeStream.foreachBatch(log)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    left = dict(counts)
    for _, rows in log.batches:
        assert 0 < len(rows) <= budget
        per_partition = {p: sum(1 for r in rows if r["partition"] == p) for p in counts}
        assert all(per_partition[p] >= 1 for p in counts if left[p] > 0), (per_partition, left)
        left = {p: left[p] - per_partition[p] for p in counts}
    assert len(log.batches) == 4  # ceil(153 / 40)
    assert_exactly_once(log.rows, stored_records(spark_cluster, "rate"))


def test_available_now_reads_what_was_there_at_start_then_stops(spark, spark_cluster, tmp_path):
    """Trigger.availableNow reads the records present when the query started and stops by itself, even
    while more arrive; the next run picks up the records appended since."""
    create_topic(spark_cluster, "available-now", partitions=2)
    before = produce(spark_cluster, "available-now", {0: 50, 1: 50})
    checkpoint = str(tmp_path / "checkpoint")
    log = BatchLog()

    def append_during_first_batch(df, batch_id):
        if batch_id == 0:
            produce(spark_cluster, "available-now", {0: 10, 1: 10}, first=100)
        log(df, batch_id)

    query = (stream(spark, spark_cluster, "available-now", maxOffsetsPerTrigger=60).writeStream
             .foreachBatch(append_during_first_batch).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert sorted(bytes(r["value"]) for r in log.rows) == sorted(before)
    assert len(log.batches) == 2

    later = BatchLog()
    query = (stream(spark, spark_cluster, "available-now").writeStream.foreachBatch(later)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert_exactly_once(log.rows + later.rows, stored_records(spark_cluster, "available-now"))
    assert len(later.rows) == 20


def test_new_partitions_are_picked_up_from_earliest(spark, spark_cluster, tmp_path):
    """Partitions added with `topics alter` while a query runs are read from their first record."""
    create_topic(spark_cluster, "growing", partitions=1)
    produce(spark_cluster, "growing", {0: 10})
    log = BatchLog()
    lock = threading.Lock()

    def keep(df, batch_id):
        with lock:
            log(df, batch_id)

    query = (stream(spark, spark_cluster, "growing").writeStream.foreachBatch(keep)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="200 milliseconds")
             .start())
    try:
        wait_for_query(query, lambda: len(log.rows) >= 10, what="the first 10 records")
        with Admin(spark_cluster.bootstrap) as admin:
            admin.alter_partitions("growing", 3)
        produce(spark_cluster, "growing", {1: 5, 2: 5}, first=10)
        wait_for_query(query, lambda: len(log.rows) >= 20, what="records of the new partitions")
    finally:
        query.stop()
    assert_exactly_once(log.rows, stored_records(spark_cluster, "growing"))


def _trimmed_topic(cluster, name: str) -> tuple[int, int]:
    """A one-partition topic whose oldest records retention has removed (it may go on removing while the
    test runs); returns (log start, high watermark) once the first records are gone."""
    create_topic(cluster, name, partitions=1, retention_bytes=3000)
    with Producer(cluster.bootstrap, linger_ms=0) as producer:
        for n in range(40):
            producer.send(name, bytes(200), key=str(n).encode(), partition=0).result()  # one batch each
    with Reader(cluster.bootstrap) as reader:
        wait_until(lambda: reader.offsets(name, 0)[0] > 0, 30, 0.1, what="retention to trim the topic")
        return reader.offsets(name, 0)


def test_data_removed_by_retention_is_reported_per_fail_on_data_loss(spark, spark_cluster, tmp_path):
    """Reading from an offset that retention removed fails with a clear error under failOnDataLoss=true,
    and with failOnDataLoss=false skips to the log start and reads the rest."""
    log_start, high_watermark = _trimmed_topic(spark_cluster, "trimmed")
    from_zero = '{"trimmed": {"0": 0}}'
    strict = stream(spark, spark_cluster, "trimmed", startingOffsets=from_zero)
    query = (strict.writeStream.foreachBatch(BatchLog()).option("checkpointLocation", str(tmp_path / "strict"))
             .trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException, match="removed by retention"):
        query.awaitTermination(QUERY_TIMEOUT_S)

    log = BatchLog()
    lenient = stream(spark, spark_cluster, "trimmed", startingOffsets=from_zero, failOnDataLoss="false")
    query = (lenient.writeStream.foreachBatch(log).option("checkpointLocation", str(tmp_path / "lenient"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    with Reader(spark_cluster.bootstrap) as reader:
        log_start_after, _ = reader.offsets("trimmed", 0)
    offsets = [r["offset"] for r in log.rows]
    assert offsets == list(range(offsets[0], high_watermark))
    assert log_start <= offsets[0] <= log_start_after  # from the log start when it was read, not from 0
