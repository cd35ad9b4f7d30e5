"""Chaos: a full disk under one broker is a state, not a crash — the broker stays alive (no SIGBUS), says so in
BrokerStats, leads nothing while full, every write of the cluster is still acknowledged, and once the disk has
room again it catches up to byte-identical replicas with nothing lost or duplicated."""
from __future__ import annotations

import os
import subprocess

import pytest

from raftbus.client import Admin, Producer
from tests.chaos.harness import replicas_identical
from tests.helpers import LocalCluster, wait_until
from tests.history import History
from tests.system.conftest import wait_cluster_ready
from tests.system.test_failover import TOPIC, all_in_sync, read_everything

PARTITIONS = 2
TMPFS_SIZE = "48m"
VALUE_BYTES = 64 * 1024
ENV = {"RAFTBUS_STORAGE_FREE_BYTES_MIN": str(16 << 20), "RAFTBUS_STORAGE_FREE_CHECK_INTERVAL_MS": "200"}


def mount_tmpfs(path, size: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill a broker's disk needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.decode().strip()}")


def resize_tmpfs(path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)


def unmount(path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def small_disk_cluster(tmp_path):
    cluster = LocalCluster(tmp_path, brokers=3, env=ENV)
    for broker in cluster.brokers:
        broker.data_dir.mkdir(parents=True)
    full = cluster.broker(3).data_dir
    mount_tmpfs(full, TMPFS_SIZE)
    try:
        cluster.start()
        wait_cluster_ready(cluster)
        yield cluster
    finally:
        cluster.stop()
        unmount(full)


def stats_of(bootstrap: str, broker_id: int):
    with Admin(bootstrap) as admin:
        return next((s for s in admin.broker_stats() if s.broker_id == broker_id), None)


def no_stopped_groups(bootstrap: str, broker_id: int) -> bool:
    stopped = stats_of(bootstrap, broker_id).stopped_groups
    assert not stopped, f"stopped groups: {stopped}"
    return True


def leaders(bootstrap: str) -> set[int]:
    with Admin(bootstrap) as admin:
        return {p.leader_id for p in admin.describe_topic(TOPIC).partitions}


def send(producer: Producer, history: History, prefix: str, count: int) -> None:
    for i in range(count):
        value = f"{prefix}-{i}-".encode().ljust(VALUE_BYTES, b"x")
        history.track(value, producer.send(TOPIC, value, key=str(i)))
    producer.flush()


def test_a_full_disk_refuses_nothing_healthy_and_recovers_when_room_returns(small_disk_cluster):
    cluster = small_disk_cluster
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    history = History()
    with Producer(cluster.bootstrap, linger_ms=2) as producer:
        send(producer, history, "filling", 800)  # ~50 MiB: more than the 48 MiB disk under broker 3 can hold
        wait_until(lambda: stats_of(cluster.bootstrap, 3).disk_full, 60, what="broker 3 reports a full disk")
        send(producer, history, "while-full", 100)
        assert cluster.broker(3).alive, "the broker with the full disk died"
        assert 3 not in leaders(cluster.bootstrap)
    assert not history.failed, (len(history.failed), history.errors)
    assert history.acked_count == 900
    history.check(read_everything(cluster.bootstrap), PARTITIONS)

    resize_tmpfs(cluster.broker(3).data_dir, "512m")
    wait_until(lambda: not stats_of(cluster.bootstrap, 3).disk_full, 30, what="broker 3 has room again")
    wait_until(lambda: no_stopped_groups(cluster.bootstrap, 3), 30, what="no stopped group")
    wait_until(lambda: all_in_sync(cluster.bootstrap, 3), 90, what="broker 3 back in sync")
    with Producer(cluster.bootstrap, linger_ms=2) as producer:
        send(producer, history, "after", 50)
    assert not history.failed, (len(history.failed), history.errors)
    history.check(read_everything(cluster.bootstrap), PARTITIONS)
    wait_until(lambda: replicas_identical([b.data_dir for b in cluster.brokers]), 60,
               what="byte-identical replicas")
