"""Fixtures for system tests: a real 3-broker cluster on loopback ports, stopped by pid at the end.

`cluster` runs every test that uses it twice: plaintext, and secure (mutual TLS on the Raft port, TLS on the
client port, tokens and ACLs on; the test acts as the bootstrap admin, see tests/system/secure.py).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from tests.helpers import LocalCluster, wait_until
from tests.system.secure import admin_environment, make_secure


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
def running_cluster(root: Path, env: dict[str, str] | None = None, *, secure: bool = False) -> Iterator[LocalCluster]:
    """3 brokers started in `root` and ready; stopped by pid on the way out, whatever happened. With `secure`,
    TLS, auth and ACLs are on and this process is the admin (cluster.secure holds the CA and admin token)."""
    cluster = LocalCluster(root, brokers=3, env=env)
    cluster.secure = make_secure(cluster, root) if secure else None
    with ExitStack() as stack:
        if secure:
            stack.enter_context(admin_environment(cluster.secure))
        try:
            cluster.start()
            wait_cluster_ready(cluster)
            yield cluster
        finally:
            cluster.stop()


@pytest.fixture(params=["plaintext", "secure"])
def cluster(request, tmp_path):
    with running_cluster(tmp_path, secure=request.param == "secure") as cluster:
        yield cluster
