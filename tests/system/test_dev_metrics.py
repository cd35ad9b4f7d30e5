"""System test of `raftbus dev` with metrics: it gives each broker a metrics port, prints the URLs, and each URL
serves that broker's metrics; SIGTERM stops the whole local cluster."""
from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import wait_until

pytestmark = pytest.mark.system


def contiguous_free_ports(count: int) -> int:
    """The first of `count` consecutive loopback ports that are all free now."""
    for _ in range(200):
        first = random.randrange(20_000, 60_000 - count)
        sockets = []
        try:
            for port in range(first, first + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise AssertionError(f"no {count} consecutive free ports found")


def broker_id_at(url: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "raftbus_broker_id")


def test_dev_prints_a_metrics_url_per_broker(tmp_path):
    first = contiguous_free_ports(9)  # 3 × (gRPC, Raft), then 3 metrics ports
    command = [sys.executable, "-m", "raftbus.broker", "dev", "--brokers", "3", "--data-dir", str(tmp_path),
               "--base-port", str(first), "--metrics-base-port", str(first + 6), "--kafka-base-port", "0",
               "--log-level", "WARNING"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    lines = []
    try:
        while not lines or "cluster ready" not in lines[-1]:
            line = proc.stdout.readline()
            assert line, f"raftbus dev exited before the cluster was ready: {lines}"
            lines.append(line.strip())
        urls = [line.split()[-1] for line in lines if " metrics http://" in line]
        assert urls == [f"http://127.0.0.1:{first + 6 + i}/metrics" for i in range(3)], lines
        for node, url in enumerate(urls, start=1):
            assert wait_until(lambda: broker_id_at(url) == node, 10, 0.2, what=f"broker {node} metrics")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert "raftbus dev: stopped" in proc.stdout.read()
