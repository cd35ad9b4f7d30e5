"""Spark tier: df.write and writeStream .format("raftbus") put rows into topics as Kafka's sink does."""
from __future__ import annotations

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import Row
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

from raftbus.client.murmur2 import partition_for_key
from tests.spark.support import QUERY_TIMEOUT_S, create_topic, produce, stored_records, stream

HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
SCHEMA = StructType([StructField("value", StringType()), StructField("key", StringType()),
                     StructField("partition", IntegerType()), StructField("headers", ArrayType(HEADER))])


def write(df, cluster, **options):
    writer = df.write.format("raftbus").mode("append").option("bootstrap", cluster.bootstrap)
    for name, value in options.items():
        writer = writer.option(name, str(value))
    writer.save()


def test_batch_write_routes_by_partition_then_key_and_keeps_headers(spark, spark_cluster):
    """Rows with a partition land there, keyed rows where murmur2 puts their key, every value once, headers
    and keys as given."""
    create_topic(spark_cluster, "sink-batch", 3)
    rows = [("pinned-0", None, 2, [("n", b"0")]), ("keyed-1", "user-1", None, None),
            ("keyed-2", "user-2", None, [("a", b"x"), ("b", None)])]
    rows += [(f"loose-{n}", None, None, None) for n in range(3, 60)]
    write(spark.createDataFrame(rows, SCHEMA).repartition(2), spark_cluster, topic="sink-batch")

    stored = {r.value: r for r in stored_records(spark_cluster, "sink-batch")}
    assert sorted(stored) == sorted(value.encode() for value, *_ in rows)
    assert stored[b"pinned-0"].partition == 2 and stored[b"pinned-0"].headers == (("n", b"0"),)
    assert stored[b"keyed-1"].partition == partition_for_key(b"user-1", 3) and stored[b"keyed-1"].key == b"user-1"
    assert stored[b"keyed-2"].headers == (("a", b"x"), ("b", None))


def test_topic_column_sends_each_row_to_its_topic(spark, spark_cluster):
    """Without the topic option every row goes to the topic its topic column names; binary values stay as
    they are."""
    create_topic(spark_cluster, "sink-left", 1)
    create_topic(spark_cluster, "sink-right", 2)
    df = spark.createDataFrame([(f"sink-{'left' if n % 3 else 'right'}", bytearray([n, 0, 255]))
                                for n in range(30)], "topic string, value binary")
    write(df, spark_cluster)
    left = [r.value for r in stored_records(spark_cluster, "sink-left")]
    right = [r.value for r in stored_records(spark_cluster, "sink-right")]
    assert sorted(left) == sorted(bytes([n, 0, 255]) for n in range(30) if n % 3)
    assert sorted(right) == sorted(bytes([n, 0, 255]) for n in range(30) if not n % 3)


@pytest.fixture(scope="module")
def errors_topic(spark_cluster):
    create_topic(spark_cluster, "sink-errors", 1)


@pytest.mark.parametrize("columns, options, message", [
    ("key string", {"topic": "sink-errors"}, "needs a value column"),
    ("value string", {}, "the option topic or a topic column"),
    ("value string", {"topic": "sink-no-such-topic"}, "UnknownTopic: topic .sink-no-such-topic. does not exist"),
    ("value string, values string", {"topic": "sink-errors"}, "has no column 'values'"),
    ("value int", {"topic": "sink-errors"}, "column value must be string or binary"),
    ("value string", {"topic": "sink-errors", "batchBytesMax": "0"}, "batchBytesMax must be an integer"),
])
def test_bad_columns_and_options_fail_before_anything_is_written(spark, spark_cluster, errors_topic, columns,
                                                                 options, message):
    """A missing value or topic, an unknown topic or column, a wrong type or a bad option fails the write on
    the driver with a message that names it, and the topic stays empty."""
    df = spark.createDataFrame([], columns)
    with pytest.raises(PySparkException, match=message):
        write(df, spark_cluster, **options)
    assert stored_records(spark_cluster, "sink-errors") == []


def test_rows_that_do_not_fit_their_topic_fail_the_task_with_a_typed_error(spark, spark_cluster):
    """A partition the topic lacks, or a queue column on a stream topic, fails the write with its code."""
    create_topic(spark_cluster, "sink-rows", 2)
    with pytest.raises(PySparkException, match="UnknownPartition: topic .sink-rows. has no partition 7"):
        write(spark.createDataFrame([("v", 7)], "value string, partition int"), spark_cluster, topic="sink-rows")
    with pytest.raises(PySparkException, match="WrongTopicKind: only queue topics take priority"):
        write(spark.createDataFrame([("v", 1)], "value string, priority int"), spark_cluster, topic="sink-rows")
    assert stored_records(spark_cluster, "sink-rows") == []


def test_streaming_sink_copies_a_topic(spark, spark_cluster, tmp_path):
    """readStream → writeStream raftbus copies every record of a topic once, across two runs on one checkpoint."""
    create_topic(spark_cluster, "sink-from", 2)
    create_topic(spark_cluster, "sink-to", 3)
    checkpoint = str(tmp_path / "checkpoint")
    values = []
    for first in (0, 40):
        values += produce(spark_cluster, "sink-from", {0: 25, 1: 15}, first=first)
        query = (stream(spark, spark_cluster, "sink-from").select("key", "value").writeStream.format("raftbus")
                 .option("bootstrap", spark_cluster.bootstrap).option("topic", "sink-to")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        assert query.awaitTermination(QUERY_TIMEOUT_S)
        assert query.exception() is None
    copied = stored_records(spark_cluster, "sink-to")
    assert sorted(r.value for r in copied) == sorted(values)
    assert all(r.partition == partition_for_key(r.key, 3) for r in copied)


def test_overwrite_is_refused_because_the_sink_appends(spark, spark_cluster, errors_topic):
    """mode("overwrite") cannot replace a topic's records: the write fails on the driver and adds nothing."""
    with pytest.raises(PySparkException, match="the raftbus sink appends to topics"):
        (spark.createDataFrame([("v",)], "value string").write.format("raftbus").mode("overwrite")
         .option("bootstrap", spark_cluster.bootstrap).option("topic", "sink-errors").save())
    assert stored_records(spark_cluster, "sink-errors") == []
