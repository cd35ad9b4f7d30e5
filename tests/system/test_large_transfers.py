"""System test: with a 4 MiB Raft send buffer, a broker that was down while four partitions gained ~10 MB each
(compacted past it, so it needs their snapshots: more than twice the buffer each, ten times together) catches up
over the one shared connection, which is never dropped, and `raftbus topics verify` finds its replicas equal
to the leaders'."""
from __future__ import annotations

import json

import pytest

from raftbus.broker.raft.snapshots import SNAPSHOT_FILE
from raftbus.client import Admin, Producer
from tests.helpers import wait_until
from tests.system.conftest import running_cluster
from tests.system.test_metrics import metrics_urls, scrape, total
from tests.system.test_verify import raftbus_json

pytestmark = pytest.mark.system

TOPIC = "bulky"
PARTITIONS = 4
RECORD = b"v" * (100 << 10)
RECORDS = 400  # 100 per partition: ~10 MB each
ENV = {
    "RAFTBUS_METRICS_LISTEN": "127.0.0.1:0",
    "RAFTBUS_BATCH_BYTES_MAX": str(1 << 20),
    "RAFTBUS_RAFT_COMMAND_BYTES_MAX": str((1 << 20) + 4096),
    "RAFTBUS_RAFT_SEND_BUFFER_BYTES_MAX": str(4 << 20),
    "RAFTBUS_RAFT_BULK_SEND_BUFFER_BYTES_MAX": str(1 << 20),
    "RAFTBUS_RAFT_CATCH_UP_BYTES_IN_FLIGHT_MAX": str(512 << 10),
    "RAFTBUS_RAFT_SNAPSHOT_CHUNK_BYTES": str(256 << 10),
    "RAFTBUS_RAFT_LOG_COMPACTION_BYTES": str(2 << 20),
}


def in_sync(bootstrap: str):
    with Admin(bootstrap) as admin:
        parts = admin.describe_topic(TOPIC).partitions
    return all(p.leader_id and len(p.isr) == 3 for p in parts) and parts


def test_a_broker_back_from_downtime_receives_large_snapshots_without_losing_the_connection(tmp_path):
    with running_cluster(tmp_path, env=ENV) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        wait_until(lambda: in_sync(cluster.bootstrap), 60, 0.5, what="every partition in sync")
        cluster.broker(3).terminate()
        with Producer(cluster.brokers[0].address, batch_bytes_max=1 << 20) as producer:
            futures = [producer.send(TOPIC, RECORD + str(i).encode(), partition=i % PARTITIONS)
                       for i in range(RECORDS)]
            producer.flush()
        assert all(f.result(60).offset >= 0 for f in futures)
        # Every broker hosts every partition. A leader keeps the entries of a follower that answered within
        # raft_leader_fallback_timeout_ms, so its group compacts that long after broker 3 left.
        wait_until(lambda: not groups_without_snapshot(cluster.brokers[:2]), 60, 0.5,
                   what="every group on brokers 1 and 2 compacted past what broker 3 holds")

        cluster.broker(3).start()
        wait_until(lambda: in_sync(cluster.bootstrap), 180, 1.0, what="the restarted broker back in sync")
        code, report = raftbus_json(cluster.bootstrap, "topics", "verify", TOPIC)
        assert code == 0 and all(p["replicas_agree"] for p in report["partitions"]), json.dumps(report)
        samples = wait_until(lambda: scrape_each(cluster.bootstrap), 30, 0.5, what="every broker's metrics")
        assert total(samples, "raftbus_raft_transport_send_buffer_overflows_total") == 0
        restarted = [s for s in samples if total([s], "raftbus_broker_id") == 3]
        assert total(restarted, "raftbus_raft_snapshots_received_total") >= 1
        assert total(restarted, "raftbus_raft_transport_connections_lost_total") == 0
        assert total(samples, "raftbus_raft_flow_control_waits_total") > 0


def groups_without_snapshot(brokers) -> list[str]:
    """The partition groups on `brokers` that hold no snapshot yet. A new group has none; it writes one when it
    compacts, once its log passed raft_log_compaction_bytes (2 MiB here), all of it written after broker 3 left."""
    return [f"broker {b.node_id}: {d.name}" for b in brokers for d in partition_dirs(b)
            if not (d / "raft" / SNAPSHOT_FILE).exists()]


def partition_dirs(broker) -> list:
    """The directories of the partition replicas in a broker's data dir (one per partition of the topic)."""
    dirs = [d for d in (broker.data_dir / "partitions").glob("p*") if ".deleted-" not in d.name]
    assert len(dirs) == PARTITIONS, dirs
    return dirs


def scrape_each(bootstrap: str):
    """Every broker's samples, once each broker advertises a metrics URL that answers (the restarted one has a
    new port)."""
    try:
        samples = [scrape(url) for url in metrics_urls(bootstrap)]
    except OSError:
        return None
    return samples if sorted(total([s], "raftbus_broker_id") for s in samples) == [1, 2, 3] else None
