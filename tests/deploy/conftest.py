"""Every deployment provides a cluster secret and cluster id (a Kubernetes Secret, the systemd environment file):
without them a broker listening beyond loopback refuses to start (docs/security.md), so the settings these tests
load get the values such a deployment would hold."""
import os

import pytest


@pytest.fixture(autouse=True)
def deployment_credentials(monkeypatch):
    monkeypatch.setenv("RAFTBUS_CLUSTER_SECRET", os.urandom(32).hex())
    monkeypatch.setenv("RAFTBUS_CLUSTER_ID", "raftbus-deploy-test")
