"""System test of the open-files bound on real brokers: with `storage_replicas_open_max` = 3, brokers hosting 12
replicas each keep at most 3 partition stores and 3 journals open (seen in /proc/<pid>/fd and on /metrics), and
every record written to every partition is read back, before and after a kill -9 and restart of a broker. A
partition's store is created at its first write: none exists on disk before the first record, all exist after."""
from __future__ import annotations

import os

import pytest

from raftbus.client import Admin, Producer, Reader
from tests.helpers import wait_until
from tests.system.conftest import running_cluster
from tests.system.test_metrics import metrics_urls, scrape, total

pytestmark = pytest.mark.system

TOPIC = "many"
PARTITIONS = 12
OPEN_MAX = 3
ENV = {
    "RAFTBUS_METRICS_LISTEN": "127.0.0.1:0",
    "RAFTBUS_STORAGE_REPLICAS_OPEN_MAX": str(OPEN_MAX),
    # nothing reads an idle partition's store on its own while the test counts open files
    "RAFTBUS_RETENTION_CHECK_INTERVAL_MS": "3600000",
    "RAFTBUS_OFFSETS_RETENTION_CHECK_INTERVAL_MS": "3600000",
}


def partition_files_open(pid: int) -> dict[str, int]:
    """Descriptors of broker `pid` open on partition files: LMDB data files and Raft journals."""
    counts = {"data.mdb": 0, "raft.journal": 0}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if "/partitions/" in target:
            name = os.path.basename(target)
            if name in counts:
                counts[name] += 1
    return counts


def send_to_every_partition(bootstrap: str, tag: str) -> dict[int, int]:
    with Producer(bootstrap, linger_ms=0) as producer:
        futures = {p: producer.send(TOPIC, f"{tag}-{p}".encode(), partition=p) for p in range(PARTITIONS)}
        return {p: f.result(60).offset for p, f in futures.items()}


def every_partition(bootstrap: str) -> dict[int, list[bytes]]:
    with Reader(bootstrap) as reader:
        return {p: [r.value for r in reader.iter_partition(TOPIC, p, stop_at_end=True)] for p in range(PARTITIONS)}


def stores_on_disk(cluster) -> dict[int, int]:
    """Partition stores (LMDB data files) on each broker's disk."""
    return {n: len(list((cluster.broker(n).data_dir / "partitions").glob("*/store/data.mdb"))) for n in (1, 2, 3)}


def within_bound(cluster, urls) -> bool:
    samples = [scrape(url) for url in urls]
    for samples_of_one in samples:
        for kind in ("stores", "journals"):
            if total([samples_of_one], "raftbus_storage_replicas_open", kind=kind) > OPEN_MAX:
                return False
    for node_id in (1, 2, 3):
        files = partition_files_open(cluster.broker(node_id).proc.pid)
        if files["data.mdb"] > 2 * OPEN_MAX or files["raft.journal"] > OPEN_MAX:
            return False
    return True


def test_brokers_hosting_more_replicas_than_the_bound_keep_it_and_lose_nothing(tmp_path):
    with running_cluster(tmp_path, env=ENV) as cluster:
        urls = wait_until(lambda: metrics_urls(cluster.bootstrap), 30, 0.5, what="every broker's metrics_url")
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
            admin.wait_for_leaders(TOPIC)
        assert stores_on_disk(cluster) == {1: 0, 2: 0, 3: 0}  # led, and nothing written: no store yet
        assert total([scrape(url) for url in urls], "raftbus_storage_replicas_open", kind="stores") == 0
        assert send_to_every_partition(cluster.bootstrap, "first") == {p: 0 for p in range(PARTITIONS)}
        assert every_partition(cluster.bootstrap) == {p: [f"first-{p}".encode()] for p in range(PARTITIONS)}
        wait_until(lambda: within_bound(cluster, urls), 60, 0.5, what=f"at most {OPEN_MAX} stores and journals open")
        wait_until(lambda: stores_on_disk(cluster) == {1: PARTITIONS, 2: PARTITIONS, 3: PARTITIONS}, 30, 0.5,
                   what="a store of every partition on every broker once written")
        samples = [scrape(url) for url in urls]
        assert total(samples, "raftbus_storage_replicas_open_max") == 3 * OPEN_MAX
        assert total(samples, "raftbus_storage_parked_total", kind="stores") > 0
        assert total(samples, "raftbus_storage_parked_total", kind="journals") > 0
        assert total(samples, "raftbus_storage_reopened_total", kind="stores") > 0

        cluster.broker(2).kill()
        cluster.broker(2).start()
        assert send_to_every_partition(cluster.bootstrap, "second") == {p: 1 for p in range(PARTITIONS)}
        assert every_partition(cluster.bootstrap) == {p: [f"first-{p}".encode(), f"second-{p}".encode()]
                                                      for p in range(PARTITIONS)}
        # The restarted broker serves metrics on a new port and registers it once it is back: read the URLs again
        # on every poll, so a stale one (refused) is not polled for the whole wait.
        wait_until(lambda: within_bound(cluster, metrics_urls(cluster.bootstrap)), 60, 0.5,
                   what="the bound kept after the restart")
