"""Spark tier: a micro-batch that dies halfway through its writes and is replayed from the checkpoint writes
every record exactly once."""
from __future__ import annotations

import os
from collections import Counter

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from tests.spark.support import QUERY_TIMEOUT_S, create_topic, produce, stored_records, stream

# Small Arrow batches and small produce batches: the failing task hands the sink many record batches and
# has dozens of produce batches acknowledged (more than the 5 a broker remembers per producer) before it dies.
ARROW_RECORDS_PER_BATCH = 50
MISSING_PARTITION = 99
PARTITION_0_RECORDS = 600  # eo-in-0 .. eo-in-599 on eo-in's partition 0
FAIL_INDEX = 500  # partition 0's task fails at eo-in-500
SINK_OPTIONS = {"batchBytesMax": "300", "bufferBytesMax": "600"}


@pytest.fixture
def small_arrow_batches(spark):
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, str(ARROW_RECORDS_PER_BATCH))
    try:
        yield
    finally:
        spark.conf.set(key, before)


def start_copy(spark, cluster, checkpoint: str, fail_marker: str, fail_at: bytes):
    """A query copying eo-in to eo-out. While `fail_marker` exists, the record `fail_at` is sent to a partition
    eo-out lacks, so the sink's task fails there (UnknownPartition) after writing the records before it."""
    def partition(value: bytes):
        return MISSING_PARTITION if value == fail_at and os.path.exists(fail_marker) else None

    writer = (stream(spark, cluster, "eo-in")
              .select("key", "value", F.udf(partition, "int")("value").alias("partition")).writeStream
              .format("raftbus").option("bootstrap", cluster.bootstrap).option("topic", "eo-out")
              .option("checkpointLocation", checkpoint).trigger(availableNow=True))
    for name, value in SINK_OPTIONS.items():
        writer = writer.option(name, value)
    return writer.start()


def test_replayed_micro_batch_writes_each_record_once(spark, spark_cluster, tmp_path, small_arrow_batches):
    """The first run dies in the middle of partition 0's task after most of its records before the failing
    one were written (the other task may finish, or be cancelled when the stage fails); restarted on the
    checkpoint, Spark replays the same micro-batch, and eo-out ends with every input value exactly once."""
    create_topic(spark_cluster, "eo-in", 2)
    create_topic(spark_cluster, "eo-out", 3)
    values = produce(spark_cluster, "eo-in", {0: PARTITION_0_RECORDS, 1: 400})
    checkpoint, marker = str(tmp_path / "checkpoint"), tmp_path / "fail"
    marker.write_text("fail while this file exists")

    query = start_copy(spark, spark_cluster, checkpoint, str(marker), fail_at=f"eo-in-{FAIL_INDEX}".encode())
    with pytest.raises(StreamingQueryException, match="UnknownPartition: topic 'eo-out' has no partition 99"):
        query.awaitTermination(QUERY_TIMEOUT_S)
    written_before = Counter(r.value for r in stored_records(spark_cluster, "eo-out"))
    assert max(written_before.values()) == 1
    before_failure = set(values[:FAIL_INDEX])
    after_failure = set(values[FAIL_INDEX:PARTITION_0_RECORDS])
    assert not after_failure & written_before.keys(), "partition 0's task wrote past the failing record"
    # The task blocks once more than bufferBytesMax is unacknowledged, so at most a few dozen of the records
    # it took before the failing one (~26 bytes each) can be missing.
    assert len(before_failure & written_before.keys()) >= FAIL_INDEX - 100, "the failed run wrote too little"

    marker.unlink()
    query = start_copy(spark, spark_cluster, checkpoint, str(marker), fail_at=f"eo-in-{FAIL_INDEX}".encode())
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert query.exception() is None
    written = Counter(r.value for r in stored_records(spark_cluster, "eo-out"))
    assert written == Counter(values), f"duplicated: {[v for v, n in written.items() if n > 1][:5]}"
