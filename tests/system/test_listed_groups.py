"""System test: a consumer group that exists only through offsets set without a member (an operator's
`groups reset-offsets` on a group that does not exist yet, or `backup restore`) is listed by `groups list` and
described by `groups describe` (state empty, with its committed offsets and lag), and a consumer joining it starts
from those offsets."""
from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager

import pytest

from raftbus.client import Admin, Consumer, Producer
from tests.helpers import LocalCluster
from tests.system.conftest import wait_cluster_ready

pytestmark = pytest.mark.system


@contextmanager
def one_broker(root):
    cluster = LocalCluster(root, brokers=1)
    try:
        cluster.start()
        wait_cluster_ready(cluster)
        yield cluster
    finally:
        cluster.stop()


def cli(bootstrap: str, *argv: str) -> str:
    done = subprocess.run([sys.executable, "-c", "from raftbus.cli import main; raise SystemExit(main())",
                           "--bootstrap", bootstrap, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    with Producer(bootstrap, linger_ms=1) as producer:
        for partition, count in per_partition.items():
            for i in range(count):
                producer.send(topic, f"{partition}-{i}".encode(), partition=partition)
        producer.flush()


def listed(bootstrap: str) -> dict[str, str]:
    return {g["name"]: g["state"] for g in json.loads(cli(bootstrap, "groups", "list", "--json"))}


def offsets(bootstrap: str, group: str) -> dict[int, tuple[int, int]]:
    described = json.loads(cli(bootstrap, "groups", "describe", group, "--json"))
    assert described["state"] == "empty" and described["members"] == []
    return {p["partition"]: (p["committed_offset"], p["lag_records"]) for p in described["partitions"]}


def test_reset_offsets_of_a_new_group_creates_it_and_a_consumer_starts_there(tmp_path):
    with one_broker(tmp_path) as cluster:
        bootstrap = cluster.bootstrap
        with Admin(bootstrap) as admin:
            admin.create_topic("events", partitions=2, replication_factor=1)
        produce(bootstrap, "events", {0: 5, 1: 3})
        assert "audit" not in listed(bootstrap)
        cli(bootstrap, "groups", "reset-offsets", "audit", "--topic", "events", "--to-offset", "2")
        assert listed(bootstrap)["audit"] == "empty"
        assert offsets(bootstrap, "audit") == {0: (2, 3), 1: (2, 1)}
        with Consumer(bootstrap, group="audit", topics=["events"], auto_offset_reset="latest") as consumer:
            seen = []
            while len(seen) < 4 and (records := consumer.poll(timeout_s=10.0)):
                seen += [(r.partition, r.offset) for r in records]
        assert sorted(seen) == [(0, 2), (0, 3), (0, 4), (1, 2)]


def test_restored_groups_are_listed_and_described_with_their_offsets(tmp_path):
    with one_broker(tmp_path / "source") as source:
        with Admin(source.bootstrap) as admin:
            admin.create_topic("orders", partitions=2, replication_factor=1)
        produce(source.bootstrap, "orders", {0: 4, 1: 4})
        with Consumer(source.bootstrap, group="billing", topics=["orders"], auto_offset_reset="earliest",
                      enable_auto_commit=False) as consumer:
            read = 0
            while read < 8 and (records := consumer.poll(timeout_s=10.0)):
                read += len(records)
            consumer.commit({("orders", 0): 3, ("orders", 1): 1})
        cli(source.bootstrap, "backup", "create", str(tmp_path / "backup"))
    with one_broker(tmp_path / "target") as target:
        cli(target.bootstrap, "backup", "restore", str(tmp_path / "backup"))
        assert listed(target.bootstrap) == {"billing": "empty"}
        assert offsets(target.bootstrap, "billing") == {0: (3, 1), 1: (1, 3)}
