"""Shared test helpers: one wait_until, loopback ports, and real broker processes stopped by pid."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


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


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (bound together, then released)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class BrokerProcess:
    node_id: int
    grpc_port: int
    raft_port: int
    data_dir: Path
    peers: str
    env: dict = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    join: str = ""  # a running cluster's client address: the broker joins it instead of using `peers`

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self) -> "BrokerProcess":
        cmd = [sys.executable, "-m", "raftbus.broker", "start", "--node-id", str(self.node_id),
               "--data-dir", str(self.data_dir), "--listen", self.address,
               "--raft-listen", f"127.0.0.1:{self.raft_port}", "--log-level", "WARNING"]
        cmd += ["--join", self.join] if self.join else ["--peers", self.peers]
        log = open(self.data_dir.parent / f"broker-{self.node_id}.log", "ab")
        env = {**os.environ, **self.env}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env)
        log.close()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"broker {self.node_id} exited before ready (see {log.name})")
        event = json.loads(line)
        assert event["event"] == "ready", event
        return self

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
    """N real broker processes on loopback ports, each with its own data dir."""

    def __init__(self, root: Path, brokers: int = 3, env: dict | None = None):
        ports = free_ports(2 * brokers)
        peers = ",".join(f"{i + 1}@127.0.0.1:{ports[2 * i + 1]}" for i in range(brokers))
        self.brokers = [BrokerProcess(i + 1, ports[2 * i], ports[2 * i + 1], root / f"broker-{i + 1}", peers,
                                      env=env or {}) for i in range(brokers)]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def start(self) -> "LocalCluster":
        for broker in self.brokers:
            broker.data_dir.mkdir(parents=True, exist_ok=True)
            broker.start()
        return self

    def broker(self, node_id: int) -> BrokerProcess:
        return self.brokers[node_id - 1]

    def stop(self) -> None:
        for broker in self.brokers:
            if broker.alive:
                try:
                    broker.terminate()
                except AssertionError:
                    pass
