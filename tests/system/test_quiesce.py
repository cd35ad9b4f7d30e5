"""System test of quiescence on real brokers: idle partitions quiesce on every replica (seen on /metrics), a write
wakes a quiesced partition and commits, and kill -9 of the broker leading quiesced partitions elects new leaders
that commit what is written next, with nothing acknowledged lost."""
from __future__ import annotations

import pytest

from raftbus.client import Admin, Producer, Reader
from tests.helpers import wait_until
from tests.system.conftest import running_cluster
from tests.system.test_metrics import metrics_urls, scrape, total

pytestmark = pytest.mark.system

TOPIC = "quiet"
PARTITIONS = 6


def quiesced(urls) -> float:
    return total([scrape(url) for url in urls], "raftbus_raft_groups_quiesced")


def leaders(bootstrap: str) -> dict[int, int]:
    with Admin(bootstrap) as admin:
        return {p.partition: p.leader_id for p in admin.describe_topic(TOPIC).partitions}


def send_to_every_partition(bootstrap: str, tag: str) -> dict[int, int]:
    """One acknowledged record per partition; partition → its offset."""
    with Producer(bootstrap, linger_ms=0) as producer:
        futures = {p: producer.send(TOPIC, f"{tag}-{p}".encode(), partition=p) for p in range(PARTITIONS)}
        return {p: f.result(60).offset for p, f in futures.items()}


def values_of(bootstrap: str, partition: int) -> list[bytes]:
    with Reader(bootstrap) as reader:
        return [r.value for r in reader.iter_partition(TOPIC, partition, stop_at_end=True)]


def test_quiesced_partitions_wake_on_writes_and_fail_over(tmp_path):
    with running_cluster(tmp_path, env={"RAFTBUS_METRICS_LISTEN": "127.0.0.1:0"}) as cluster:
        urls = wait_until(lambda: metrics_urls(cluster.bootstrap), 30, 0.5, what="every broker's metrics_url")
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        every_replica = 3 * PARTITIONS
        wait_until(lambda: quiesced(urls) == every_replica, 90, 0.5, what="every partition replica quiesced")

        offsets = send_to_every_partition(cluster.bootstrap, "first")
        assert offsets == {p: 0 for p in range(PARTITIONS)}
        wait_until(lambda: quiesced(urls) == every_replica, 90, 0.5, what="quiesced again after the writes")

        victim = leaders(cluster.bootstrap)[0]
        cluster.broker(victim).kill()
        wait_until(lambda: all(leader not in (None, 0, victim) for leader in leaders(cluster.bootstrap).values()),
                   60, 0.3, what="a new leader for every partition the killed broker led")
        offsets = send_to_every_partition(cluster.bootstrap, "second")
        assert offsets == {p: 1 for p in range(PARTITIONS)}
        for partition in range(PARTITIONS):
            assert values_of(cluster.bootstrap, partition) == [f"first-{partition}".encode(),
                                                               f"second-{partition}".encode()]
