"""Stream a raftbus topic into parquet with a checkpoint, then aggregate what landed.

Against a local cluster (`raftbus dev --brokers 3` in another terminal, or any bootstrap list):

    .venv/bin/python docs/examples/spark_to_parquet.py --bootstrap 127.0.0.1:7070 --topic orders \
        --produce 1000 --out /tmp/orders-parquet --checkpoint /tmp/orders-checkpoint --available-now

`--produce N` first writes N sample orders ({"user": ..., "amount": ...} JSON, keyed by user).
`--available-now` reads what is there and stops; without it the query runs until Ctrl-C. Run it again with
the same --checkpoint and it resumes where it stopped: no record twice, none missed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from raftbus.client import Admin, Producer
from raftbus.client import spark as raftbus_spark
from raftbus.client.errors import TopicExists

ORDER_SCHEMA = "user STRING, amount INT"


def local_session() -> SparkSession:
    """A small local Spark on loopback whose Python workers run this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("raftbus-to-parquet")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def produce_sample_orders(bootstrap: str, topic: str, count: int) -> None:
    """Create `topic` if needed and send `count` orders: user-0..user-4, amounts 1..7."""
    with Admin(bootstrap) as admin:
        try:
            admin.create_topic(topic, partitions=3)
        except TopicExists:
            pass
    with Producer(bootstrap) as producer:
        for i in range(count):
            user = f"user-{i % 5}"
            producer.send(topic, json.dumps({"user": user, "amount": i % 7 + 1}).encode(), key=user.encode())
        producer.flush()


def start_stream(spark: SparkSession, bootstrap: str, topic: str, out_dir: str, checkpoint_dir: str,
                 available_now: bool):
    """The streaming query: every record of `topic` into parquet files under out_dir, checkpointed."""
    raftbus_spark.register(spark)
    records = (spark.readStream.format("raftbus")
               .option("bootstrap", bootstrap)
               .option("subscribe", topic)
               .option("startingOffsets", "earliest")
               .option("maxOffsetsPerTrigger", 50_000)
               .load())
    rows = records.select(F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("value"),
                          "topic", "partition", "offset", "timestamp")
    writer = (rows.writeStream.format("parquet").option("path", out_dir)
              .option("checkpointLocation", checkpoint_dir))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="1 second")
    return writer.start()


def totals_by_user(spark: SparkSession, out_dir: str) -> DataFrame:
    """The small aggregation: orders and amount per user, over everything the stream wrote."""
    orders = spark.read.parquet(out_dir).select(F.from_json("value", ORDER_SCHEMA).alias("order"))
    return (orders.groupBy("order.user").agg(F.count("*").alias("orders"), F.sum("order.amount").alias("amount"))
            .orderBy("user"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("RAFTBUS_BOOTSTRAP", "127.0.0.1:7070"))
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--out", default="./orders-parquet")
    parser.add_argument("--checkpoint", default="./orders-checkpoint")
    parser.add_argument("--produce", type=int, default=0, help="first send this many sample orders")
    parser.add_argument("--available-now", action="store_true", help="read what is there, then stop")
    args = parser.parse_args(argv)
    if args.produce:
        produce_sample_orders(args.bootstrap, args.topic, args.produce)
    spark = local_session()
    try:
        query = start_stream(spark, args.bootstrap, args.topic, args.out, args.checkpoint, args.available_now)
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
        totals_by_user(spark, args.out).show()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
