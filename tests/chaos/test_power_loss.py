"""Chaos: a restart on a new boot after an unclean stop (what a power loss or an OS crash looks like to the
broker; simulated here by rewriting the recorded boot id, since the test cannot cut the power) discards every
store, even a damaged one, and rebuilds each from its fsynced snapshot and CRC-checked journal: nothing
acknowledged is lost or duplicated and the replicas end byte-identical."""
from __future__ import annotations

import json

from raftbus.client import Admin, Producer
from tests.chaos.harness import replicas_identical
from tests.chaos.test_damaged_files import damage_store_root_page
from tests.helpers import LocalCluster, wait_until
from tests.history import History
from tests.system.conftest import wait_cluster_ready
from tests.system.test_failover import TOPIC, all_in_sync, read_everything

PARTITIONS = 3
ENV = {"RAFTBUS_RAFT_LOG_COMPACTION_ENTRIES": "50"}  # snapshots, so the rebuild restores one and replays the rest


def send_rounds(bootstrap: str, history: History, prefix: str, rounds: int) -> None:
    with Producer(bootstrap, linger_ms=0) as producer:
        for r in range(rounds):
            for i in range(6):
                value = f"{prefix}-{r}-{i}".encode()
                history.track(value, producer.send(TOPIC, value, key=str(i)))
            producer.flush()


def test_every_broker_rebuilds_its_stores_after_a_power_loss_of_all(tmp_path):
    cluster = LocalCluster(tmp_path, brokers=3, env=ENV)
    try:
        cluster.start()
        wait_cluster_ready(cluster)
        with Admin(cluster.bootstrap) as admin:
            topic_id = admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3).topic_id
        history = History()
        send_rounds(cluster.bootstrap, history, "before", 300)
        wait_until(lambda: all_in_sync(cluster.bootstrap, 3), 60, what="in sync")
        wait_until(lambda: list(tmp_path.glob("broker-*/partitions/*/raft/raft.snapshot")), 60,
                   what="a group's snapshot written (the copy runs off the loop)")

        for broker in cluster.brokers:
            broker.kill()
            record = broker.data_dir / "boot.json"
            assert json.loads(record.read_text())["clean"] is False
            record.write_text(json.dumps({"boot_id": "the boot before the power loss", "clean": False}))
        damage_store_root_page(cluster.broker(1).data_dir / "partitions" / f"p{topic_id}.0" / "store" / "data.mdb")
        for broker in cluster.brokers:
            broker.start()
        wait_cluster_ready(cluster)
        wait_until(lambda: all_in_sync(cluster.bootstrap, 3), 90, what="every partition led and in sync")
        for broker in cluster.brokers:
            assert "stores discarded" in (tmp_path / f"broker-{broker.node_id}.log").read_text()
        history.check(read_everything(cluster.bootstrap), PARTITIONS)
        send_rounds(cluster.bootstrap, history, "after", 20)
        assert not history.failed, (len(history.failed), history.errors)
        records = read_everything(cluster.bootstrap)
        history.check(records, PARTITIONS)
        assert len(records) == history.acked_count
        wait_until(lambda: replicas_identical([b.data_dir for b in cluster.brokers]), 60,
                   what="byte-identical replicas")
    finally:
        cluster.stop()
