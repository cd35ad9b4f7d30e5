"""Spark tier: batch reads (spark.read.format("raftbus")) against a real 3-broker cluster."""
from __future__ import annotations

import time
from datetime import timezone

import pytest

from tests.helpers import wait_until
from tests.spark.support import assert_exactly_once, create_topic, produce, stored_records


def batch(spark, cluster, topic: str, **options):
    reader = spark.read.format("raftbus").option("bootstrap", cluster.bootstrap).option("subscribe", topic)
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader.load()


def test_batch_read_returns_kafkas_columns_between_starting_and_ending_offsets(spark, spark_cluster):
    """A batch read plans one Spark partition per broker partition and returns exactly the records between
    startingOffsets and endingOffsets, with key, value, topic, partition, offset, timestamp, timestampType and
    headers as the producer wrote them."""
    create_topic(spark_cluster, "batch-read", partitions=3)
    produce(spark_cluster, "batch-read", {0: 30, 1: 30, 2: 30}, headers=True)
    records = stored_records(spark_cluster, "batch-read")

    df = batch(spark, spark_cluster, "batch-read", includeHeaders="true",
               startingOffsets='{"batch-read": {"0": 5}}', endingOffsets='{"batch-read": {"0": 20, "1": 10}}')
    assert df.rdd.getNumPartitions() == 3
    rows = df.collect()
    wanted = [r for r in records if (r.partition == 0 and 5 <= r.offset < 20)
              or (r.partition == 1 and r.offset < 10) or r.partition == 2]
    assert_exactly_once(rows, wanted)
    by_position = {(r.partition, r.offset): r for r in records}
    for row in rows:
        record = by_position[(row["partition"], row["offset"])]
        assert row["topic"] == "batch-read" and row["timestampType"] == 0
        assert bytes(row["key"]) == record.key
        assert row["timestamp"].astimezone(timezone.utc).timestamp() * 1000 == pytest.approx(record.timestamp_ms)
        headers = [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in row["headers"] or []]
        assert headers == list(record.headers)

    everything = batch(spark, spark_cluster, "batch-read")
    assert "headers" not in everything.columns
    assert_exactly_once(everything.collect(), records)
    as_tuples = batch(spark, spark_cluster, "batch-read", useArrow="false", includeHeaders="true")
    assert sorted(as_tuples.collect()) == sorted(batch(spark, spark_cluster, "batch-read",
                                                       includeHeaders="true").collect())


def test_batch_read_of_assigned_partitions_and_a_pattern(spark, spark_cluster):
    """assign reads only the named partitions; subscribePattern reads every stream topic whose whole name
    matches; a topic without records reads as empty."""
    for name in ("pattern-a", "pattern-b", "other-pattern-a"):
        create_topic(spark_cluster, name, partitions=2)
        produce(spark_cluster, name, {0: 4, 1: 3})
    assigned = (spark.read.format("raftbus").option("bootstrap", spark_cluster.bootstrap)
                .option("assign", '{"pattern-a": [1], "pattern-b": [0]}').load())
    assert sorted((r["topic"], r["partition"]) for r in assigned.collect()) == \
        [("pattern-a", 1)] * 3 + [("pattern-b", 0)] * 4
    matched = (spark.read.format("raftbus").option("bootstrap", spark_cluster.bootstrap)
               .option("subscribePattern", "pattern-.").load())
    assert sorted({r["topic"] for r in matched.collect()}) == ["pattern-a", "pattern-b"]
    assert matched.count() == 14
    create_topic(spark_cluster, "pattern-empty", partitions=2)
    assert batch(spark, spark_cluster, "pattern-empty").collect() == []


def test_starting_timestamp_starts_each_partition_at_its_first_later_record(spark, spark_cluster):
    """startingTimestamp reads, in every partition, the records produced at or after that time and none
    before it."""
    create_topic(spark_cluster, "by-time", partitions=2)
    produce(spark_cluster, "by-time", {0: 5, 1: 5})
    cutoff_ms = int(time.time() * 1000) + 1
    wait_until(lambda: time.time() * 1000 > cutoff_ms, 5, 0.001, what="the clock to pass the cutoff")
    later = produce(spark_cluster, "by-time", {0: 3, 1: 4}, first=10)
    rows = batch(spark, spark_cluster, "by-time", startingTimestamp=cutoff_ms).collect()
    assert sorted(bytes(r["value"]) for r in rows) == sorted(later)
    assert sorted((r["partition"], r["offset"]) for r in rows) == [(0, 5), (0, 6), (0, 7)] + \
        [(1, o) for o in range(5, 9)]
