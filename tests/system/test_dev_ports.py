"""System tests: `raftbus dev` and `raftbus broker start` check every port they would bind before starting anything
and name who holds a taken one; a second dev cluster runs beside the first (metrics included); dev says why a
broker it restarts exited.

Every cluster here runs on ports it holds (`--base-port 0`, and port 0 for `broker start`), and a port taken by
someone else is one a running cluster serves on, or one this test binds and keeps while the broker tries. Which
port broker N gets from a fixed --base-port, and the lines dev prints for them, are tested in
tests/unit/broker/test_ports.py."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from raftbus.client import Admin
from tests.helpers import wait_until
from tests.system.test_dev import Output, dev_addresses

pytestmark = pytest.mark.system

RAFTBUS = [str(Path(sys.executable).with_name("raftbus"))]


def dev_command(data_dir, base: int, *extra: str) -> list[str]:
    return [*RAFTBUS, "dev", "--data-dir", str(data_dir), "--base-port", str(base), "--restart-delay-ms", "500",
            "--log-level", "WARNING", *extra]


class Dev:
    """A `raftbus dev` process on ports it holds (--base-port 0) and its output, stopped with SIGINT by pid."""

    def __init__(self, data_dir, brokers: int = 3):
        self.data_dir, self.brokers = data_dir, brokers
        self.proc = subprocess.Popen(dev_command(data_dir, 0, "--brokers", str(brokers)), stdout=subprocess.PIPE,
                                     text=True)
        self.out = Output(self.proc.stdout)

    def wait_ready(self) -> "Dev":
        wait_until(lambda: self.out.has("cluster ready"), 120, what="the dev cluster ready")
        self.bootstrap, raft = dev_addresses(self.out.lines)
        self.client = {i + 1: int(a.rpartition(":")[2]) for i, a in enumerate(self.bootstrap.split(","))}
        self.raft = raft
        self.metrics = {int(line.split()[3]): int(line.split()[-1].split(":")[2].split("/")[0])
                        for line in self.out.has(" metrics http://")}
        kafka = self.out.has("raftbus dev: kafka-bootstrap ")[0].split()[-1].split(",")
        self.kafka = {i + 1: int(a.rpartition(":")[2]) for i, a in enumerate(kafka)}
        return self

    @property
    def cluster_id(self) -> str:
        return json.loads((self.data_dir / "cluster-credentials.json").read_text())["cluster_id"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    dev = Dev(tmp_path_factory.mktemp("first"))
    try:
        yield dev.wait_ready()
    finally:
        dev.stop()


def one_line_failure(argv, timeout_s=60, env=None) -> str:
    """Run a command that must fail: its one stderr line (exit status 1, nothing on stdout)."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, (done.stdout, done.stderr)
    return done.stderr.strip()


def test_the_ports_the_brokers_pick_are_printed_as_they_registered_them(first):
    """With --base-port 0 every broker's metrics and Kafka port is one it picked: all distinct, none a held client
    or Raft port, and each printed as the broker registered it."""
    assert sorted(first.metrics) == [1, 2, 3] and sorted(first.kafka) == [1, 2, 3]
    every = [*first.client.values(), *first.raft.values(), *first.metrics.values(), *first.kafka.values()]
    assert len(set(every)) == 12, every
    with Admin(first.bootstrap) as admin:
        registered = {b.broker_id: b for b in admin.cluster_status().brokers}
    assert {n: b.metrics_url for n, b in registered.items()} == {
        n: f"http://127.0.0.1:{port}/metrics" for n, port in first.metrics.items()}
    assert {n: b.kafka_address for n, b in registered.items()} == {
        n: f"127.0.0.1:{port}" for n, port in first.kafka.items()}


def test_dev_on_taken_ports_names_the_other_cluster_and_starts_nothing(first, tmp_path):
    line = one_line_failure(dev_command(tmp_path / "second", first.client[1]))
    assert line == (f"error: ADDRESS_IN_USE: 127.0.0.1:{first.client[1]} (client port of broker 1) is in use by "
                    f"another raftbus cluster (cluster_id {first.cluster_id}, broker 1); stop it, or give this "
                    "cluster other ports (--base-port)")
    assert not (tmp_path / "second").exists()
    line = one_line_failure(dev_command(first.data_dir, first.client[1]))
    assert f"is in use by broker 1 of this data dir's own cluster (cluster_id {first.cluster_id})" in line
    assert first.proc.poll() is None and not first.out.has("exited")


def test_dev_checks_the_raft_metrics_and_kafka_ports_too(first, tmp_path):
    """A base port on the first cluster's Raft port lands a client port there; with --base-port 0 (client and
    Raft ports held, so free) a fixed metrics or Kafka base port on the first cluster's is found taken."""
    line = one_line_failure(dev_command(tmp_path / "second", first.raft[1]))
    assert line.startswith(f"error: ADDRESS_IN_USE: 127.0.0.1:{first.raft[1]} (client port of broker 1) is in use "
                           "by the Raft port of raftbus broker 1;")
    line = one_line_failure(dev_command(tmp_path / "third", 0, "--metrics-base-port", str(first.metrics[1])))
    assert line.startswith(f"error: ADDRESS_IN_USE: 127.0.0.1:{first.metrics[1]} (metrics port of broker 1) is in "
                           "use by the metrics endpoint of raftbus broker 1;")
    line = one_line_failure(dev_command(tmp_path / "fourth", 0, "--kafka-base-port", str(first.kafka[1])))
    assert line.startswith(f"error: ADDRESS_IN_USE: 127.0.0.1:{first.kafka[1]} (Kafka port of broker 1) is in use "
                           "by another process;")
    for data_dir in ("second", "third", "fourth"):
        assert not (tmp_path / data_dir).exists()


@pytest.mark.parametrize("taken, role, who", [
    ("listen", "client port, listen", "another raftbus cluster (cluster_id {cluster_id}, broker 2)"),
    ("raft", "Raft port, raft_listen", "the Raft port of raftbus broker 2"),
    ("metrics", "metrics port, metrics_listen", "the metrics endpoint of raftbus broker 2"),
    ("kafka", "Kafka port, kafka_listen", "another process"),
])
def test_broker_start_on_a_taken_port_names_it_and_who_answers(first, tmp_path, taken, role, who):
    """Every other port is port 0 (the broker holds one the kernel picks): only the taken one can fail."""
    address = {"listen": first.client[2], "raft": first.raft[2], "metrics": first.metrics[2],
               "kafka": first.kafka[2]}
    ports = {"listen": 0, "raft": 0, "metrics": 0, "kafka": 0, taken: address[taken]}
    argv = [*RAFTBUS, "broker", "start", "--node-id", "1", "--data-dir", str(tmp_path / "b"),
            "--listen", f"127.0.0.1:{ports['listen']}", "--raft-listen", f"127.0.0.1:{ports['raft']}",
            "--peers", f"1@127.0.0.1:{ports['raft']}", "--metrics-listen", f"127.0.0.1:{ports['metrics']}",
            "--kafka-listen", f"127.0.0.1:{ports['kafka']}"]
    line = one_line_failure(argv)
    assert line == (f"error: ADDRESS_IN_USE: 127.0.0.1:{address[taken]} ({role}) is in use by "
                    f"{who.format(cluster_id=first.cluster_id)}; stop it, or give this broker other addresses "
                    "(--listen, --raft-listen, --metrics-listen, --kafka-listen)")


def test_a_second_dev_cluster_runs_beside_the_first(first, tmp_path):
    second = Dev(tmp_path / "second", brokers=1)
    try:
        second.wait_ready()
        with Admin(second.bootstrap) as admin:
            status = admin.cluster_status()
        assert status.cluster_id == second.cluster_id != first.cluster_id
        assert [b.metrics_url for b in status.brokers] == [f"http://127.0.0.1:{second.metrics[1]}/metrics"]
        assert second.metrics[1] not in first.metrics.values()
        with Admin(first.bootstrap) as admin:
            assert admin.cluster_status().cluster_id == first.cluster_id
    finally:
        second.stop()


def test_dev_says_why_a_broker_it_restarts_exited(tmp_path):
    """Broker 2's client port is taken (a listener bound beside dev's hold, as only a process of the same user can)
    and broker 2 killed: dev quotes the line the new process wrote."""
    dev = Dev(tmp_path)
    holder = None
    try:
        dev.wait_ready()
        with Admin(dev.bootstrap) as admin:
            pid = next(s.pid for s in admin.broker_stats() if s.broker_id == 2)
        holder = socket.socket()
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind(("127.0.0.1", dev.client[2]))
        holder.listen()
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: dev.out.has("broker 2 (pid"), 30, what="the kill announced")
        assert dev.out.has(f"broker 2 (pid {pid}) was killed by SIGKILL")
        said = wait_until(lambda: dev.out.has("exited with 1 (error: ADDRESS_IN_USE"), 60,
                          what="the failed restart explained")
        assert (f"exited with 1 (error: ADDRESS_IN_USE: 127.0.0.1:{dev.client[2]} (client port, listen) is in use "
                "by another process;") in said[0]
        assert "2 of 3 brokers still serving" in said[0]
    finally:
        if holder is not None:
            holder.close()
        dev.stop()
