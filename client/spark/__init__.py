"""The raftbus Spark source: read raftbus topics from Spark exactly as Kafka topics.

    from raftbus.client import spark as raftbus_spark
    raftbus_spark.register(spark)
    df = (spark.readStream.format("raftbus")
          .option("bootstrap", "127.0.0.1:7070")
          .option("subscribe", "orders")
          .option("startingOffsets", "earliest")
          .load())          # key, value, topic, partition, offset, timestamp, timestampType (+ headers)

Needs pyspark >= 4.2 and pyarrow (`pip install 'raftbus[spark]'`); options in options.py, design in docs/spark.md.
"""
from __future__ import annotations

from raftbus.client.spark.source import NAME, RaftbusBatchReader, RaftbusDataSource, RaftbusStreamReader


def register(spark) -> None:
    """Register the `raftbus` format with a SparkSession (once per session)."""
    spark.dataSource.register(RaftbusDataSource)


__all__ = ["NAME", "RaftbusBatchReader", "RaftbusDataSource", "RaftbusStreamReader", "register"]
