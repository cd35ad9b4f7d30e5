"""Spark tier: a partition leader killed -9 during a micro-batch does not fail or change the batch."""
from __future__ import annotations

from raftbus.client import Admin
from tests.helpers import wait_until
from tests.spark.support import QUERY_TIMEOUT_S, BatchLog, assert_exactly_once, create_topic, produce, stored_records, stream

TOPIC = "leader-kill"


def leaders(cluster) -> dict[int, int | None]:
    with Admin(cluster.bootstrap) as admin:
        return {p.partition: p.leader_id for p in admin.describe_topic(TOPIC).partitions}


def all_in_sync(cluster) -> bool:
    with Admin(cluster.bootstrap) as admin:
        parts = admin.describe_topic(TOPIC).partitions
        status = admin.cluster_status()
    return all(p.leader_id and len(p.isr) == 3 for p in parts) and all(b.alive for b in status.brokers)


def test_leader_killed_during_a_micro_batch_still_completes_it_exactly(spark, spark_cluster, tmp_path):
    """Killing -9 the leader of partition 0 in the middle of a micro-batch — after a first pass over the
    batch left every executor's router pointing at that leader, before the pass the sink keeps — makes the
    executors retry through the router (small fetches, so each range takes many calls) and the batch still
    holds exactly the planned records."""
    create_topic(spark_cluster, TOPIC, partitions=3)
    produce(spark_cluster, TOPIC, {0: 300, 1: 300, 2: 300})
    records = stored_records(spark_cluster, TOPIC)
    log = BatchLog()
    killed = []

    def kill_leader_then_read(df, batch_id):
        if batch_id == 0:
            assert df.count() == len(records)  # a first read of the batch: routers now cache the leaders
            victim = leaders(spark_cluster)[0]
            spark_cluster.broker(victim).kill()
            killed.append(victim)
        log(df, batch_id)

    query = (stream(spark, spark_cluster, TOPIC, fetchBytesMax=2048).writeStream.foreachBatch(kill_leader_then_read)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S)
        assert len(killed) == 1 and leaders(spark_cluster)[0] not in (None, killed[0])
        assert [batch_id for batch_id, _ in log.batches] == [0]
        assert_exactly_once(log.rows, records)
    finally:
        for victim in killed:
            spark_cluster.broker(victim).start()
        wait_until(lambda: all_in_sync(spark_cluster), 60, 0.2, what="the killed broker back in sync")
