"""Fixtures for system tests: a real 3-broker cluster on loopback ports, stopped by pid at the end."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import LocalCluster, wait_until


def wait_cluster_ready(cluster: LocalCluster, timeout_s: float = 60.0) -> None:
    """Every broker registered and a controller elected, as seen from the bootstrap list."""
    from raftbus.client import Admin

    def ready():
        with Admin(cluster.bootstrap) as admin:
            status = admin.cluster_status()
            alive = [b for b in status.brokers if b.alive]
            return status.controller_id and len(alive) == len(cluster.brokers) and status
    wait_until(ready, timeout_s, 0.2, what="cluster ready")


@contextmanager
def running_cluster(root: Path, env: dict[str, str] | None = None) -> Iterator[LocalCluster]:
    """3 brokers started in `root` and ready; stopped by pid on the way out, whatever happened."""
    cluster = LocalCluster(root, brokers=3, env=env)
    try:
        cluster.start()
        wait_cluster_ready(cluster)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster(tmp_path):
    with running_cluster(tmp_path) as cluster:
        yield cluster
