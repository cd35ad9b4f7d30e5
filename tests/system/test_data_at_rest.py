"""System tests of data at rest on real broker processes: every directory a broker's data dir holds is 0700 and
every file 0600 (stores, journals, snapshots, metadata), a data dir made with looser modes is tightened when the
broker starts, and `raftbus dev --secure` writes its secrets, tokens, keys and logs owner-only."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from raftbus.client import Admin, Producer
from tests.helpers import wait_until
from tests.system.conftest import running_cluster

pytestmark = pytest.mark.system

# snapshot every group after a little log, so the data dirs hold snapshot files too
ENV = {"RAFTBUS_RAFT_LOG_COMPACTION_BYTES": "65536"}


def loose_entries(root: Path) -> list[str]:
    """Every entry under `root` (itself included) that is a directory not 0700 or a file not 0600. The brokers run
    while this looks: an entry renamed or removed between the listing and its stat (a `snapshot.partial` becoming
    `raft.snapshot`) is gone, so it is not counted."""
    found = []
    # os.walk passes over a directory that goes mid-walk; rglob would raise
    paths = [root] + [Path(top) / name for top, dirs, files in os.walk(root) for name in dirs + files]
    for path in paths:
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            continue
        mode = stat.S_IMODE(info.st_mode)
        if mode != (0o700 if stat.S_ISDIR(info.st_mode) else 0o600):
            found.append(f"{path.relative_to(root.parent)} {oct(mode)}")
    return found


def snapshot_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if "snapshot" in p.name and p.is_file()]


def test_broker_data_dirs_hold_only_owner_only_files(tmp_path):
    """Goal: after topics, records, a consumer group's commit and snapshots, no broker data dir holds a file anyone
    but its owner can read (the test harness makes the data dirs 0755 before starting: they are tightened)."""
    with running_cluster(tmp_path, env=ENV) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic("at-rest", partitions=2, replication_factor=3)
            admin.create_topic("at-rest-jobs", partitions=1, replication_factor=3, kind="queue")
        with Producer(cluster.bootstrap, linger_ms=5) as producer:
            for i in range(3_000):
                producer.send("at-rest", b"v" * 200, key=str(i))
            producer.send("at-rest-jobs", b"job").result(30)
            producer.flush()
        data_dirs = [b.data_dir for b in cluster.brokers]
        wait_until(lambda: all(snapshot_files(d) for d in data_dirs), 60, 0.2, what="snapshots in every data dir")
        for data_dir in data_dirs:
            assert loose_entries(data_dir) == []


def test_the_dev_cluster_writes_its_secrets_tokens_and_logs_owner_only(tmp_path):
    """Goal: `raftbus dev --secure` leaves nothing in its data dir (credentials, admin token, keys, logs, broker
    data) that another user could read."""
    data = tmp_path / "dev"
    proc = subprocess.Popen([sys.executable, "-m", "raftbus.broker", "dev", "--secure", "--brokers", "1",
                             "--data-dir", str(data), "--base-port", "0", "--metrics-base-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: "cluster ready" in proc.stdout.readline(), 90, interval_s=0, what="dev cluster ready")
        for name in ("cluster-credentials.json", "admin.token", "ca.pem"):
            assert (data / name).is_file(), name
        assert list((data / "tls").glob("*-key.pem"))
        assert loose_entries(data) == []
    finally:
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"raftbus dev did not stop within 60 s of SIGINT; it printed: "
                                 f"{proc.communicate()[0][-3000:]}") from None
