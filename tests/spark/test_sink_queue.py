"""Spark tier: the raftbus sink enqueues rows on queue topics with their priority, group, delay and
idempotency key."""
from __future__ import annotations

from raftbus.client import Queues
from tests.spark.support import create_topic

QUEUE_ROWS = [("low", 9, "shop.a", None, None), ("urgent", 1, "shop.b", None, None),
              ("middle", 5, "shop.a", None, None), ("later", 1, "shop.a", 3_600_000, None),
              ("once", 7, None, None, "order-17"), ("once-again", 7, None, None, "order-17")]
COLUMNS = "value string, priority int, group string, delay_ms long, idempotency_key string"


def test_queue_rows_keep_priority_group_delay_and_idempotency_key(spark, spark_cluster):
    """Ready messages come out by priority with their group; a delayed one waits; a second row with the same
    idempotency key is dropped by the broker."""
    create_topic(spark_cluster, "sink-queue", 1, kind="queue")
    (spark.createDataFrame(QUEUE_ROWS, COLUMNS).coalesce(1).write.format("raftbus").mode("append")
     .option("bootstrap", spark_cluster.bootstrap).option("topic", "sink-queue").save())
    with Queues(spark_cluster.bootstrap) as queues:
        stats = queues.stats("sink-queue")
        leased = queues.lease("sink-queue", 0, max_messages=10)
    assert (stats.ready, stats.delayed) == (4, 1)
    assert [(m.value, m.priority, m.group) for m in leased] == [
        (b"urgent", 1, "shop.b"), (b"middle", 5, "shop.a"), (b"once", 7, ""), (b"low", 9, "shop.a")]
    assert leased[2].idempotency_key == "order-17"
