"""System test: `raftbus dev` keeps serving when one of its brokers is killed -9, says so, and brings the broker
back on its data directory after the restart delay."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from raftbus.client import Admin, Producer
from tests.helpers import wait_until

pytestmark = pytest.mark.system


class Output:
    """The dev runner's stdout lines, collected on a thread."""

    def __init__(self, stream):
        self.lines: list[str] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def has(self, text: str):
        return [line for line in self.lines if text in line]


def pids(bootstrap: str) -> dict[int, int]:
    with Admin(bootstrap) as admin:
        return {s.broker_id: s.pid for s in admin.broker_stats()}


def start_dev(data_dir):
    """`raftbus dev` on ports it picks and holds (--base-port 0; its brokers pick their Kafka ports then, and
    metrics are off): (process, its output, bootstrap)."""
    proc = subprocess.Popen([sys.executable, "-m", "raftbus.broker", "dev", "--brokers", "3",
                             "--data-dir", str(data_dir), "--base-port", "0", "--metrics-base-port", "0",
                             "--restart-delay-ms", "500", "--log-level", "WARNING"], stdout=subprocess.PIPE, text=True)
    out = Output(proc.stdout)
    wait_until(lambda: out.has("Raft peers"), 30, what="the address lines")
    return proc, out, dev_addresses(out.lines)[0]


def dev_addresses(lines: list[str]) -> tuple[str, dict[int, int]]:
    """From `raftbus dev`'s first lines: the bootstrap list and each broker's Raft port."""
    bootstrap = next(line for line in lines if " bootstrap " in line).split(" bootstrap ")[1].split(", logs in")[0]
    peers = next(line for line in lines if "Raft peers" in line).split("Raft peers ")[1]
    raft = {int(node): int(address.rpartition(":")[2]) for node, _, address in
            (peer.partition("@") for peer in peers.split(","))}
    return bootstrap, raft


def test_dev_restarts_a_killed_broker_while_the_others_keep_serving(tmp_path):
    proc, out, bootstrap = start_dev(tmp_path)
    try:
        wait_until(lambda: out.has("cluster ready"), 90, what="dev cluster ready")
        kafka = out.has("raftbus dev: kafka-bootstrap ")[0].split()[-1].split(",")
        assert len(set(kafka)) == 3 and all(address.startswith("127.0.0.1:") for address in kafka), kafka
        with Admin(bootstrap) as admin:
            admin.create_topic("events", partitions=3, replication_factor=3)
            wait_until(lambda: sorted(b.kafka_address for b in admin.cluster_status().brokers) == sorted(kafka), 30,
                       what="every broker's kafka_address registered")
        before = wait_until(lambda: len(pids(bootstrap)) == 3 and pids(bootstrap), 30, what="three brokers")
        with Producer(bootstrap) as producer:
            assert producer.send("events", b"before", key=b"k").result(30).offset == 0
            os.kill(before[2], signal.SIGKILL)
            wait_until(lambda: out.has("broker 2 (pid"), 30, what="the exit announced")
            assert producer.send("events", b"while down", key=b"k").result(30).offset == 1
        wait_until(lambda: out.has("restarting broker 2"), 30, what="the restart announced")
        after = wait_until(lambda: pids(bootstrap).get(2) not in (None, before[2]) and pids(bootstrap), 60,
                           what="broker 2 back with a new pid")
        assert after[1] == before[1] and after[3] == before[3]
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert out.has("raftbus dev: stopped")
