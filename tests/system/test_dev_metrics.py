"""System test of `raftbus dev` with metrics: it gives each broker a metrics port, prints the URLs, and each URL
serves that broker's metrics; SIGTERM stops the whole local cluster. (Which port broker N gets from
--metrics-base-port is dev_metrics_ports', tested in tests/unit/broker/metrics.)"""
from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import wait_until

pytestmark = pytest.mark.system


def broker_id_at(url: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "raftbus_broker_id")


def test_dev_prints_a_metrics_url_per_broker(tmp_path):
    command = [sys.executable, "-m", "raftbus.broker", "dev", "--brokers", "3", "--data-dir", str(tmp_path),
               "--base-port", "0", "--kafka-base-port", "0", "--log-level", "WARNING"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    lines = []
    try:
        while not lines or "cluster ready" not in lines[-1]:
            line = proc.stdout.readline()
            assert line, f"raftbus dev exited before the cluster was ready: {lines}"
            lines.append(line.strip())
        urls = [line.split()[-1] for line in lines if " metrics http://" in line]
        assert [line.split()[3] for line in lines if " metrics http://" in line] == ["1", "2", "3"], lines
        assert len(set(urls)) == 3 and all(url.startswith("http://127.0.0.1:") for url in urls), lines
        for node, url in enumerate(urls, start=1):
            assert wait_until(lambda: broker_id_at(url) == node, 10, 0.2, what=f"broker {node} metrics")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert "raftbus dev: stopped" in proc.stdout.read()
