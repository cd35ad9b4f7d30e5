"""Fixtures for system tests: a real 3-broker cluster on loopback ports, stopped by pid at the end.

`cluster` runs every test that uses it twice: plaintext, and secure (mutual TLS on the Raft port, TLS on the
client port, tokens and ACLs on; the test acts as the bootstrap admin, see tests/system/secure.py). A fault test
whose subject is not the transport (a kill, a restart, a damaged replica under load) is marked `secure_only`: it
runs once, on the secure cluster, the setup a production cluster runs, where a failover also re-establishes TLS
and tokens; the tests of the transports themselves and the functional ones run in both.
"""
from __future__ import annotations

import pytest

from tests.helpers import running_cluster, wait_cluster_ready  # noqa: F401 - other tiers import them from here


secure_only = pytest.mark.parametrize("cluster", ["secure"], indirect=True)


@pytest.fixture(params=["plaintext", "secure"])
def cluster(request, tmp_path):
    with running_cluster(tmp_path, secure=request.param == "secure") as cluster:
        yield cluster
