"""System test: `raftbus dev` keeps serving when one of its brokers is killed -9, says so, and brings the broker
back on its data directory after the restart delay."""
from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading

import pytest

from raftbus.client import Admin, Producer
from tests.helpers import wait_until

pytestmark = pytest.mark.system


def free_port_block(count: int) -> int:
    """A base port with `count` consecutive free loopback ports, below the ephemeral range (where outgoing
    connections of other processes do not take them between this check and the brokers' bind)."""
    for _ in range(200):
        base = random.randrange(20_000, 32_000, 2)
        held = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                s.bind(("127.0.0.1", port))
                held.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise AssertionError("no block of free ports")


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
    """`raftbus dev` on a free block of ports (its Kafka ports the last three): (process, its output, bootstrap)."""
    base = free_port_block(9)
    proc = subprocess.Popen([sys.executable, "-m", "raftbus.broker", "dev", "--brokers", "3",
                             "--data-dir", str(data_dir), "--base-port", str(base), "--metrics-base-port", "0",
                             "--restart-delay-ms", "500", "--kafka-base-port", str(base + 6), "--log-level", "WARNING"],
                            stdout=subprocess.PIPE, text=True)
    return proc, Output(proc.stdout), ",".join(f"127.0.0.1:{base + 2 * i}" for i in range(3))


def test_dev_restarts_a_killed_broker_while_the_others_keep_serving(tmp_path):
    proc, out, bootstrap = start_dev(tmp_path)
    try:
        wait_until(lambda: out.has("cluster ready"), 90, what="dev cluster ready")
        first = int(bootstrap.split(",")[0].rpartition(":")[2])
        kafka = [f"127.0.0.1:{first + 6 + i}" for i in range(3)]
        assert out.has(f"raftbus dev: kafka-bootstrap {','.join(kafka)}")
        with Admin(bootstrap) as admin:
            admin.create_topic("events", partitions=3, replication_factor=3)
            wait_until(lambda: sorted(b.kafka_address for b in admin.cluster_status().brokers) == kafka, 30,
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
