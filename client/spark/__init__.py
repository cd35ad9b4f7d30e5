"""The raftbus Spark data source: read raftbus topics from Spark exactly as Kafka topics, and write to them.

    from raftbus.client import spark as raftbus_spark
    raftbus_spark.register(spark)
    df = (spark.readStream.format("raftbus")
          .option("bootstrap", "127.0.0.1:7070")
          .option("subscribe", "orders")
          .option("startingOffsets", "earliest")
          .load())          # key, value, topic, partition, offset, timestamp, timestampType (+ headers)
    (df.select("key", "value").writeStream.format("raftbus")
       .option("bootstrap", "127.0.0.1:7070").option("topic", "orders-copy")
       .option("checkpointLocation", "/tmp/copy").start())      # exactly once per micro-batch

Needs pyspark >= 4.2 and pyarrow (`pip install 'raftbus[spark]'`); options in options.py and
sink_options.py, design in docs/spark.md.
"""
from __future__ import annotations

from raftbus.client.spark.sink import RaftbusBatchWriter, RaftbusStreamWriter
from raftbus.client.spark.source import NAME, RaftbusBatchReader, RaftbusDataSource, RaftbusStreamReader
from raftbus.client.spark.workers import check_local_workers


def register(spark) -> None:
    """Register the `raftbus` format with a SparkSession (once per session). With a local master, first check
    that Spark's Python workers can import raftbus: SparkSetupError says what to set when they cannot."""
    check_local_workers(spark)
    spark.dataSource.register(RaftbusDataSource)


__all__ = ["NAME", "RaftbusBatchReader", "RaftbusBatchWriter", "RaftbusDataSource", "RaftbusStreamReader",
           "RaftbusStreamWriter", "register"]
