"""Member processes of a Kafka consumer group (tests/kafka/group_member.py) and what they printed."""
from __future__ import annotations

import json
from collections import Counter
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from confluent_kafka import Producer

from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


class Member:
    """One member process; its records and assignments are collected by a reader thread."""

    def __init__(self, client: str, bootstrap: str, topic: str, group: str, name: str, *extra: str,
                 log_dir: Path | None = None):
        self.name = name
        self.records: list[tuple[int, int, str]] = []
        self.assignments: list[list[int]] = []
        self.errors: list[str] = []
        self.closed = False
        self._lock = threading.Lock()
        cmd = [sys.executable, "-m", "tests.kafka.group_member", client, bootstrap, topic, group, "--name", name,
               *extra]
        stderr = open(log_dir / f"member-{group}-{name}.log", "ab") if log_dir else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
        if log_dir:
            stderr.close()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            event = json.loads(line)
            with self._lock:
                if "p" in event:
                    self.records.append((event["p"], event["o"], event["v"]))
                elif "assigned" in event:
                    self.assignments.append(event["assigned"])
                elif "error" in event:
                    self.errors.append(event["error"])
                elif "closed" in event:
                    self.closed = True

    @property
    def assignment(self) -> list[int] | None:
        with self._lock:
            return self.assignments[-1] if self.assignments else None

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM: the client closes (leaving the group, unless static) and the process ends."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout_s)
        self._reader.join(5)

    def kill(self) -> None:
        """kill -9 by pid: no LeaveGroup, no last commit."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._reader.join(5)


def read_by(members) -> list[tuple[int, int, str]]:
    out = []
    for member in members:
        with member._lock:
            out.extend(member.records)
    return out


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    """Produce the values round-robin over the topic's partitions (by key), acks=all, every delivery checked."""
    failures = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.send.max.retries": 100, "retry.backoff.ms": 200, "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value=value.encode(), key=value.encode(),
                         on_delivery=lambda err, _msg: failures.append(err) if err is not None else None)
    assert producer.flush(60) == 0
    assert failures == []


def wait_read(members, expected: set[str], timeout_s: float = 60) -> None:
    """Until the members together printed every expected value (and maybe more; the caller checks)."""
    def missing():
        left = expected - {v for _, _, v in read_by(members)}
        return not left or (len(left), sorted(left)[:5], [(m.name, m.assignment, m.errors[-3:]) for m in members])

    try:
        wait_until(lambda: missing() is True, timeout_s, 0.2, what=f"{len(expected)} records read by the group")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: missing (count, some, [(member, assignment, errors)]) {missing()}") from None


def assert_exactly_once(members, produced: list[str]) -> None:
    """Every produced value was printed by exactly one member, once, and every (partition, offset) once."""
    records = read_by(members)
    values = [v for _, _, v in records]
    duplicates = sorted(v for v, count in Counter(values).items() if count > 1)
    assert duplicates == [], f"read more than once: {duplicates[:20]}"
    assert sorted(values) == sorted(produced)
    positions = [(p, o) for p, o, _ in records]
    assert len(set(positions)) == len(positions)
