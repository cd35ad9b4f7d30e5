"""Fixtures shared by the cluster tests."""
from __future__ import annotations

import pytest

from tests.cluster.harness import RaftCluster


@pytest.fixture
def raft_cluster(tmp_path):
    """Three nodes' addresses and settings (RaftCluster's defaults), none started; closed after the test."""
    cluster = RaftCluster(tmp_path)
    yield cluster
    cluster.close()
