"""The docs tier's one cluster: `raftbus dev` (3 brokers, on ports it picks and holds) started once for the tier
and stopped by its pid, and `raftbus http` in front of it once a block needs the gateway."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.doc_examples import reader_env
from tests.helpers import wait_until
from tests.system.http_gateway import GatewayProcess

DEV_READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0


class Lines:
    """A process's stdout lines, collected on a thread."""

    def __init__(self, stream):
        self.lines: list[str] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def after(self, prefix: str) -> str | None:
        """The rest of the first line that starts with `prefix`, or None."""
        return next((line[len(prefix):] for line in self.lines if line.startswith(prefix)), None)


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT by pid (each stops its own children), SIGKILL if it does not end."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


class DocsCluster:
    """The addresses the tier's examples run against, by the names tests/doc_examples.py maps them from."""

    def __init__(self, root: Path):
        self.root = root
        self.work_dir = root / "work"  # the examples' current directory
        self.work_dir.mkdir()
        self.addresses: dict[str, str] = {}
        self._procs: list[subprocess.Popen] = []
        self._gateway: GatewayProcess | None = None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "raftbus.broker", "dev", "--brokers", "3", "--data-dir", str(self.root / "data"),
               "--base-port", "0", "--metrics-base-port", "0", "--log-level", "WARNING"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=reader_env())
        self._procs.append(proc)
        out = Lines(proc.stdout)

        def ready():
            assert proc.poll() is None, f"raftbus dev exited with {proc.returncode}: {out.lines}"
            return any("cluster ready" in line for line in out.lines)
        wait_until(ready, DEV_READY_TIMEOUT_S, 0.1, what="raftbus dev: cluster ready")
        self.addresses["bootstrap"] = out.after("raftbus dev: 3 brokers, bootstrap ").split(", logs in")[0]
        self.addresses["kafka"] = wait_until(lambda: out.after("raftbus dev: kafka-bootstrap "), 30, 0.1,
                                             what="raftbus dev: kafka-bootstrap")

    def gateway(self) -> str:
        """The address of `raftbus http` serving this cluster without auth, started on first use."""
        if self._gateway is None:
            self._gateway = GatewayProcess(self.addresses["bootstrap"], self.root / "gateway.log",
                                           ("--anonymous", "dev")).start()
            self.addresses["gateway"] = self._gateway.address
        return self._gateway.address

    def stop(self) -> None:
        if self._gateway is not None:
            self._gateway.stop()
        for proc in self._procs:
            _stop(proc)


@pytest.fixture(scope="package")
def docs_cluster(tmp_path_factory):
    cluster = DocsCluster(tmp_path_factory.mktemp("docs-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
