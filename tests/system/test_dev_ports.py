"""System tests: `raftbus dev` and `raftbus broker start` check every port they would bind before starting anything
and name who holds a taken one; a second dev cluster on another --base-port (metrics included) runs beside the
first; dev says why a broker it restarts exited."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from raftbus.broker.ports import KAFKA_PORT_OFFSET, METRICS_PORT_OFFSET
from raftbus.client import Admin
from tests.helpers import wait_until
from tests.system.test_dev import Output, free_port_block

pytestmark = pytest.mark.system

RAFTBUS = [str(Path(sys.executable).with_name("raftbus"))]


def dev_command(data_dir, base: int, *extra: str) -> list[str]:
    return [*RAFTBUS, "dev", "--data-dir", str(data_dir), "--base-port", str(base), "--restart-delay-ms", "500",
            "--log-level", "WARNING", *extra]


def free_dev_base(brokers: int) -> int:
    """A base port whose client, Raft and derived metrics and Kafka ports are all free now."""
    for _ in range(100):
        base = free_port_block(2 * brokers)
        derived = [base + offset + i for offset in (METRICS_PORT_OFFSET, KAFKA_PORT_OFFSET) for i in range(brokers)]
        try:
            for port in derived:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise AssertionError("no free base port")


class Dev:
    """A `raftbus dev` process and its output, stopped with SIGINT by pid."""

    def __init__(self, data_dir, base: int, brokers: int = 3):
        self.data_dir, self.base, self.brokers = data_dir, base, brokers
        self.proc = subprocess.Popen(dev_command(data_dir, base, "--brokers", str(brokers)), stdout=subprocess.PIPE,
                                     text=True)
        self.out = Output(self.proc.stdout)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.base + 2 * i}" for i in range(self.brokers))

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
    dev = Dev(tmp_path_factory.mktemp("first"), free_dev_base(3))
    try:
        wait_until(lambda: dev.out.has("cluster ready"), 120, what="the first dev cluster ready")
        yield dev
    finally:
        dev.stop()


def one_line_failure(argv, timeout_s=60, env=None) -> str:
    """Run a command that must fail: its one stderr line (exit status 1, nothing on stdout)."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, (done.stdout, done.stderr)
    return done.stderr.strip()


def test_the_metrics_and_kafka_ports_follow_the_base_port(first):
    urls = [line.split()[-1] for line in first.out.lines if " metrics http://" in line]
    assert urls == [f"http://127.0.0.1:{first.base + METRICS_PORT_OFFSET + i}/metrics" for i in range(3)]
    kafka = ",".join(f"127.0.0.1:{first.base + KAFKA_PORT_OFFSET + i}" for i in range(3))
    assert first.out.has(f"raftbus dev: kafka-bootstrap {kafka}")


def test_dev_on_taken_ports_names_the_other_cluster_and_starts_nothing(first, tmp_path):
    line = one_line_failure(dev_command(tmp_path / "second", first.base))
    assert line == (f"error: ADDRESS_IN_USE: 127.0.0.1:{first.base} (client port of broker 1) is in use by another "
                    f"raftbus cluster (cluster_id {first.cluster_id}, broker 1); stop it, or give this cluster other "
                    "ports (--base-port)")
    assert not (tmp_path / "second").exists()
    line = one_line_failure(dev_command(first.data_dir, first.base))
    assert f"is in use by broker 1 of this data dir's own cluster (cluster_id {first.cluster_id})" in line
    assert first.proc.poll() is None and not first.out.has("exited")


def test_dev_checks_the_raft_and_metrics_ports_too(first, tmp_path):
    """A base port one above the first cluster's lands its client port on a Raft port; metrics come after."""
    line = one_line_failure(dev_command(tmp_path / "second", first.base + 1))
    assert line.startswith(f"error: ADDRESS_IN_USE: 127.0.0.1:{first.base + 1} (client port of broker 1) is in use "
                           "by the Raft port of raftbus broker 1;")
    base = free_dev_base(3)
    line = one_line_failure(dev_command(tmp_path / "third", base, "--metrics-base-port",
                                        str(first.base + METRICS_PORT_OFFSET)))
    assert line.startswith(f"error: ADDRESS_IN_USE: 127.0.0.1:{first.base + METRICS_PORT_OFFSET} (metrics port of "
                           "broker 1) is in use by the metrics endpoint of raftbus broker 1;")
    line = one_line_failure(dev_command(tmp_path / "fourth", free_dev_base(3), "--kafka-base-port",
                                        str(first.base + KAFKA_PORT_OFFSET)))
    assert line.startswith(f"error: ADDRESS_IN_USE: 127.0.0.1:{first.base + KAFKA_PORT_OFFSET} (Kafka port of "
                           "broker 1) is in use by another process;")


@pytest.mark.parametrize("taken, role, who", [
    ("listen", "client port, listen", "another raftbus cluster (cluster_id {cluster_id}, broker 2)"),
    ("raft", "Raft port, raft_listen", "the Raft port of raftbus broker 2"),
    ("metrics", "metrics port, metrics_listen", "the metrics endpoint of raftbus broker 2"),
    ("kafka", "Kafka port, kafka_listen", "another process"),
])
def test_broker_start_on_a_taken_port_names_it_and_who_answers(first, tmp_path, taken, role, who):
    free = free_port_block(4)
    address = {"listen": first.base + 2, "raft": first.base + 3, "metrics": first.base + METRICS_PORT_OFFSET + 1,
               "kafka": first.base + KAFKA_PORT_OFFSET + 1}
    ports = {"listen": free, "raft": free + 1, "metrics": free + 2, "kafka": free + 3, taken: address[taken]}
    argv = [*RAFTBUS, "broker", "start", "--node-id", "1", "--data-dir", str(tmp_path / "b"),
            "--listen", f"127.0.0.1:{ports['listen']}", "--raft-listen", f"127.0.0.1:{ports['raft']}",
            "--peers", f"1@127.0.0.1:{ports['raft']}", "--metrics-listen", f"127.0.0.1:{ports['metrics']}",
            "--kafka-listen", f"127.0.0.1:{ports['kafka']}"]
    line = one_line_failure(argv)
    assert line == (f"error: ADDRESS_IN_USE: 127.0.0.1:{address[taken]} ({role}) is in use by "
                    f"{who.format(cluster_id=first.cluster_id)}; stop it, or give this broker other addresses "
                    "(--listen, --raft-listen, --metrics-listen, --kafka-listen)")


def test_a_second_dev_cluster_on_another_base_port_runs_beside_the_first(first, tmp_path):
    second = Dev(tmp_path / "second", free_dev_base(1), brokers=1)
    try:
        wait_until(lambda: second.out.has("cluster ready"), 120, what="the second dev cluster ready")
        with Admin(second.bootstrap) as admin:
            status = admin.cluster_status()
        assert status.cluster_id == second.cluster_id != first.cluster_id
        assert second.out.has(f"metrics http://127.0.0.1:{second.base + METRICS_PORT_OFFSET}/metrics")
        with Admin(first.bootstrap) as admin:
            assert admin.cluster_status().cluster_id == first.cluster_id
    finally:
        second.stop()


def test_dev_says_why_a_broker_it_restarts_exited(tmp_path):
    """Broker 2 is killed and its client port taken before the restart: dev quotes the line the new process wrote."""
    dev = Dev(tmp_path, free_dev_base(3))
    holder = None
    try:
        wait_until(lambda: dev.out.has("cluster ready"), 120, what="dev cluster ready")
        with Admin(dev.bootstrap) as admin:
            pid = next(s.pid for s in admin.broker_stats() if s.broker_id == 2)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: dev.out.has("broker 2 (pid"), 30, what="the kill announced")
        holder = socket.socket()
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", dev.base + 2))
        holder.listen()
        assert dev.out.has(f"broker 2 (pid {pid}) was killed by SIGKILL")
        said = wait_until(lambda: dev.out.has("exited with 1 (error: ADDRESS_IN_USE"), 60,
                          what="the failed restart explained")
        assert (f"exited with 1 (error: ADDRESS_IN_USE: 127.0.0.1:{dev.base + 2} (client port, listen) is in use by "
                "another process;") in said[0]
        assert "2 of 3 brokers still serving" in said[0]
    finally:
        if holder is not None:
            holder.close()
        dev.stop()
