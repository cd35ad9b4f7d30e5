"""Count page views per page and minute from one raftbus topic into another, exactly once.

Reads JSON page views ({"page": ..., "at_ms": ...}) from a topic, counts them per page in one-minute event-time
windows with a 30-second watermark, and writes each closed window once to another topic with the raftbus
sink (key: the page; value: {"page", "window_start", "views"} JSON). Against a local cluster
(`raftbus dev --brokers 3` in another terminal, or any bootstrap list):

    .venv/bin/python docs/examples/spark_windowed_counts.py --bootstrap 127.0.0.1:7070 --produce \
        --checkpoint /tmp/views-checkpoint --available-now

`--produce` first writes sample views over three minutes and one view ten minutes later, which moves the
watermark past the first three windows so they close. In append mode a window is written when the
watermark passes its end and never again; a restart on the same --checkpoint replays an unfinished
micro-batch without writing its windows twice (sortWithinTask: the aggregation's rows reach the sink after
a shuffle, in an order a replay need not repeat, so each task sorts them before writing).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from raftbus.client import Admin, Producer, Reader
from raftbus.client import spark as raftbus_spark
from raftbus.client.errors import TopicExists

VIEW_SCHEMA = "page STRING, at_ms LONG"
WINDOW = "1 minute"
WATERMARK_DELAY = "30 seconds"
SAMPLE_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a window boundary
SAMPLE_PAGES = ("home", "cart", "pay")
SAMPLE_MINUTES = 3


def local_session() -> SparkSession:
    """A small local Spark on loopback whose Python workers run this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("raftbus-windowed-counts")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def create_topics(bootstrap: str, *topics: str) -> None:
    with Admin(bootstrap) as admin:
        for topic in topics:
            try:
                admin.create_topic(topic, partitions=3)
            except TopicExists:
                pass


def sample_counts() -> dict[tuple[str, int], int]:
    """Views per (page, window start ms) that produce_sample_views sends in its closed windows."""
    return {(page, SAMPLE_START_MS + minute * 60_000): (minute + 1) * (i + 1)
            for minute in range(SAMPLE_MINUTES) for i, page in enumerate(SAMPLE_PAGES)}


def produce_sample_views(bootstrap: str, topic: str) -> None:
    """Send the views of sample_counts() spread over their minutes, then one view ten minutes later."""
    with Producer(bootstrap) as producer:
        for (page, window_ms), views in sample_counts().items():
            for n in range(views):
                view = {"page": page, "at_ms": window_ms + n * 59_000 // views}
                producer.send(topic, json.dumps(view).encode(), key=page.encode())
        late = {"page": "home", "at_ms": SAMPLE_START_MS + 10 * 60_000}
        producer.send(topic, json.dumps(late).encode(), key=b"home")
        producer.flush()


def start_counts(spark: SparkSession, bootstrap: str, views_topic: str, counts_topic: str, checkpoint_dir: str,
                 available_now: bool):
    """The streaming query: views → windowed counts per page → counts_topic, checkpointed."""
    raftbus_spark.register(spark)
    views = (spark.readStream.format("raftbus").option("bootstrap", bootstrap).option("subscribe", views_topic)
             .option("startingOffsets", "earliest").load()
             .select(F.from_json(F.col("value").cast("string"), VIEW_SCHEMA).alias("view"))
             .select("view.page", F.timestamp_millis("view.at_ms").alias("at")))
    counts = (views.withWatermark("at", WATERMARK_DELAY)
              .groupBy(F.window("at", WINDOW), "page").agg(F.count("*").alias("views")))
    records = counts.select(
        F.col("page").alias("key"),
        F.to_json(F.struct("page", F.unix_millis("window.start").alias("window_start"), "views")).alias("value"))
    writer = (records.writeStream.format("raftbus").outputMode("append").option("bootstrap", bootstrap)
              .option("topic", counts_topic).option("sortWithinTask", "true")
              .option("checkpointLocation", checkpoint_dir))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="1 second")
    return writer.start()


def read_counts(bootstrap: str, topic: str) -> list[dict]:
    """Every count record written so far."""
    with Reader(bootstrap) as reader:
        return [json.loads(r.value) for r in reader.iter_topic(topic, from_beginning=True, stop_at_end=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("RAFTBUS_BOOTSTRAP", "127.0.0.1:7070"))
    parser.add_argument("--views", default="page-views")
    parser.add_argument("--counts", default="page-view-counts")
    parser.add_argument("--checkpoint", default="./page-view-counts-checkpoint")
    parser.add_argument("--produce", action="store_true", help="first send the sample views")
    parser.add_argument("--available-now", action="store_true", help="read what is there, then stop")
    args = parser.parse_args(argv)
    create_topics(args.bootstrap, args.views, args.counts)
    if args.produce:
        produce_sample_views(args.bootstrap, args.views)
    spark = local_session()
    try:
        query = start_counts(spark, args.bootstrap, args.views, args.counts, args.checkpoint, args.available_now)
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
    finally:
        spark.stop()
    for count in read_counts(args.bootstrap, args.counts):
        print(json.dumps(count))
    return 0


if __name__ == "__main__":
    sys.exit(main())
