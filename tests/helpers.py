"""Shared test helpers: one wait_until, and real broker processes on held loopback ports, stopped by pid
(ports: see tests/ports.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.ports import REUSE_PORT_ENV, ReservedPorts, reserve_ports


def wait_until(predicate, timeout_s: float = 10.0, interval_s: float = 0.05, what: str = "condition"):
    """Poll predicate until it returns a truthy value; fail with the last value or error seen."""
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:  # keep the last error for the failure message
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last seen: {last!r}")
        time.sleep(interval_s)


@dataclass
class BrokerProcess:
    """One `raftbus broker start` process. With grpc_port or raft_port 0 the broker binds a port of its own
    choosing and the ports are read from its ready line; otherwise they are ports the harness holds
    (tests/ports.py), bound with listen_reuse_port."""
    node_id: int
    grpc_port: int
    raft_port: int
    data_dir: Path
    peers: str
    env: dict = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    join: str = ""  # a running cluster's client address: the broker joins it instead of using `peers`
    metrics_port: int | None = None  # from the ready line, when metrics_listen is set
    ready: dict = field(default_factory=dict)  # the last ready line

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self) -> "BrokerProcess":
        return self.launch().wait_ready()

    def launch(self) -> "BrokerProcess":
        """Start the process without waiting for it (wait_ready reads its ready line)."""
        cmd = [sys.executable, "-m", "raftbus.broker", "start", "--node-id", str(self.node_id),
               "--data-dir", str(self.data_dir), "--listen", self.address,
               "--raft-listen", f"127.0.0.1:{self.raft_port}", "--log-level", "WARNING"]
        cmd += ["--join", self.join] if self.join else ["--peers", self.peers or f"{self.node_id}@127.0.0.1:0"]
        reuse = REUSE_PORT_ENV if self.grpc_port and self.raft_port else {}
        env = {**os.environ, **reuse, **self.env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env)
        return self

    def wait_ready(self) -> "BrokerProcess":
        """Read the ready line of the launched process: the ports it serves on."""
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"broker {self.node_id} exited before ready (see {self.log_path})")
        event = json.loads(line)
        assert event["event"] == "ready", event
        self.ready = event
        self.grpc_port, self.raft_port, self.metrics_port = event["grpc_port"], event["raft_port"], \
            event["metrics_port"]
        return self

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"broker-{self.node_id}.log"

    def kill(self) -> None:
        """kill -9 by pid."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout_s: float = 15.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"broker {self.node_id} did not stop within {timeout_s} s of SIGTERM")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class LocalCluster:
    """N real broker processes on loopback ports held for the cluster's life (tests/ports.py), each with its
    own data dir; `stop` stops them by pid and releases the ports."""

    def __init__(self, root: Path, brokers: int = 3, env: dict | None = None):
        self.root = root
        self.env = env or {}
        self._reserved: list[ReservedPorts] = [reserve_ports(2 * brokers)]
        ports = self._reserved[0].ports
        peers = ",".join(f"{i + 1}@127.0.0.1:{ports[2 * i + 1]}" for i in range(brokers))
        self.brokers = [BrokerProcess(i + 1, ports[2 * i], ports[2 * i + 1], root / f"broker-{i + 1}", peers,
                                      env=dict(self.env)) for i in range(brokers)]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def start(self) -> "LocalCluster":
        """Launch every broker at once, then wait for each one's ready line."""
        for broker in self.brokers:
            broker.data_dir.mkdir(parents=True, exist_ok=True)
            broker.launch()
        for broker in self.brokers:
            broker.wait_ready()
        return self

    def broker(self, node_id: int) -> BrokerProcess:
        return self.brokers[node_id - 1]

    def hold_ports(self, count: int) -> list[int]:
        """`count` more loopback ports held until `stop`, for brokers' listeners that bind them beside the
        reservation (listen_reuse_port)."""
        reserved = reserve_ports(count)
        self._reserved.append(reserved)
        return reserved.ports

    def joining_broker(self, node_id: int, join: str) -> BrokerProcess:
        """A broker (not started) that joins the cluster at client address `join`, on ports held with the
        cluster's: it keeps them across restarts, as the cluster records its Raft address."""
        grpc_port, raft_port = self.hold_ports(2)
        broker = BrokerProcess(node_id, grpc_port, raft_port, self.root / f"broker-{node_id}", peers="", join=join)
        broker.data_dir.mkdir(parents=True, exist_ok=True)
        return broker

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM to every running broker at once, SIGKILL to any still running after `timeout_s`; then the
        held ports are released."""
        running = [broker for broker in self.brokers if broker.alive]
        for broker in running:
            os.kill(broker.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for broker in running:
            try:
                broker.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                broker.kill()
        for reserved in self._reserved:
            reserved.close()


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
    from tests.system.secure import admin_environment, make_secure

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
