"""System tests: a broker refuses to open its ports beyond loopback with a weak cluster secret, and `raftbus dev`
runs on a random secret of its own, kept in its data dir across restarts."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from raftbus.broker.raft.cluster_secret import (DEFAULT_CLUSTER_ID, DEFAULT_SECRET, DEV_CREDENTIALS_FILE,
                                                raft_key)
from tests.helpers import wait_until
from tests.raft_peer import RaftPeer
from tests.system.test_dev import dev_addresses

pytestmark = pytest.mark.system

RAFTBUS = str(Path(sys.executable).with_name("raftbus"))


def broker_start(tmp_path: Path, raft_host: str, env: dict) -> subprocess.Popen:
    """A lone broker on ports it picks (port 0), reported on its ready line."""
    cmd = [RAFTBUS, "broker", "start", "--node-id", "1", "--data-dir", str(tmp_path / "broker-1"),
           "--listen", "127.0.0.1:0", "--raft-listen", f"{raft_host}:0",
           "--peers", f"1@{raft_host}:0", "--log-level", "WARNING"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAFTBUS_")}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**clean, **env}, text=True)


@pytest.mark.parametrize("env", [
    {},
    {"RAFTBUS_CLUSTER_SECRET": "", "RAFTBUS_CLUSTER_ID": "prod-eu-1"},
    {"RAFTBUS_CLUSTER_SECRET": "short-secret", "RAFTBUS_CLUSTER_ID": "prod-eu-1"},
    {"RAFTBUS_CLUSTER_SECRET": "k" * 48},
], ids=["default-secret", "empty-secret", "short-secret", "default-cluster-id"])
def test_broker_start_beyond_loopback_with_a_weak_secret_exits_non_zero(tmp_path, env):
    """`raftbus broker start --raft-listen 0.0.0.0:P` with the default, an empty or a short cluster_secret (or the
    default cluster_id) exits non-zero with a message naming the setting, before opening any port."""
    proc = broker_start(tmp_path, "0.0.0.0", env)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and out == ""
    assert "cluster_secret" in err and "loopback" in err
    assert ("cluster_id" in err) if "RAFTBUS_CLUSTER_ID" not in env else True


def test_broker_start_beyond_loopback_with_a_strong_secret_starts(tmp_path):
    """The same command with a long random secret and a cluster id of its own starts and serves."""
    proc = broker_start(tmp_path, "0.0.0.0", {"RAFTBUS_CLUSTER_SECRET": os.urandom(32).hex(),
                                              "RAFTBUS_CLUSTER_ID": "prod-eu-1"})
    try:
        event = json.loads(proc.stdout.readline())
        assert event["event"] == "ready"
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def run_dev(data_dir: Path) -> tuple[subprocess.Popen, int]:
    """`raftbus dev` with 2 brokers on ports it picks and holds: (process, broker 2's Raft port, which node 1
    dials)."""
    proc = subprocess.Popen([RAFTBUS, "dev", "--brokers", "2", "--data-dir", str(data_dir), "--base-port", "0",
                             "--kafka-base-port", "0", "--log-level", "WARNING"], stdout=subprocess.PIPE, text=True)
    lines = []
    wait_until(lambda: lines.append(proc.stdout.readline()) or "cluster ready" in lines[-1], 90, 0.0,
               what="raftbus dev ready")
    return proc, dev_addresses(lines)[1][2]


def stop_dev(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 0


def test_dev_generates_a_random_secret_per_data_dir_and_reuses_it(tmp_path):
    """`raftbus dev` stores a random secret and cluster id in its data dir (owner-only), its brokers accept a
    peer proving that key and refuse the public default, and a restart on the same data dir reuses them."""
    data_dir = tmp_path / "dev"
    proc, raft_port = run_dev(data_dir)
    try:
        credentials_file = data_dir / DEV_CREDENTIALS_FILE
        credentials = json.loads(credentials_file.read_text())
        assert len(credentials["cluster_secret"]) >= 32 and credentials["cluster_secret"] != DEFAULT_SECRET
        assert credentials["cluster_id"] != DEFAULT_CLUSTER_ID
        assert credentials_file.stat().st_mode & 0o777 == 0o600
        with pytest.raises((AssertionError, ConnectionError, OSError)):
            RaftPeer(raft_port, 1, raft_key(DEFAULT_SECRET, DEFAULT_CLUSTER_ID)).handshake()
        key = raft_key(credentials["cluster_secret"], credentials["cluster_id"])
        RaftPeer(raft_port, 1, key).handshake().close()
    finally:
        stop_dev(proc)
    proc, raft_port = run_dev(data_dir)
    try:
        assert json.loads(credentials_file.read_text()) == credentials
        RaftPeer(raft_port, 1, key).handshake().close()
    finally:
        stop_dev(proc)
