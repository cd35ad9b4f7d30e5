"""System test: a deposed partition leader never serves a stale read.

The leader is frozen (SIGSTOP), the others elect a new leader and take more writes, then the old leader resumes
(SIGCONT) and is asked at once for the log's end and for records: every answer it gives must already include
the writes acknowledged by the new leader, or be a refusal that sends the client elsewhere.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import grpc
import pytest

from raftbus.client import Admin, Producer
from raftbus.client.router import grpc_connect
from raftbus.client.wire import raftbus_pb2 as pb
from tests.helpers import wait_until

pytestmark = pytest.mark.system

TOPIC = "reads"
BEFORE, AFTER = 100, 100
READS_AFTER_RESUME_S = 3.0


def leader_of_partition(bootstrap: str) -> int:
    with Admin(bootstrap) as admin:
        return admin.describe_topic(TOPIC).partitions[0].leader_id


def produce(bootstrap: str, count: int, tag: str) -> None:
    with Producer(bootstrap, linger_ms=1) as producer:
        futures = [producer.send(TOPIC, f"{tag}-{i}".encode(), partition=0) for i in range(count)]
        producer.flush(60)
    assert all(f.exception() is None for f in futures)


class StaleReadProbe:
    """Asks one broker, from a thread, for the end of the log and for its last records, over and over; keeps
    every high watermark it answered with."""

    def __init__(self, address: str):
        self.conn = grpc_connect(address)
        self.answers: list[tuple[str, int]] = []
        self.refusals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)
        self.conn.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for kind, call in (("list_offsets", self._list_offsets), ("fetch", self._fetch)):
                try:
                    self.answers.append((kind, call()))
                except grpc.RpcError:
                    self.refusals += 1

    def _list_offsets(self) -> int:
        request = pb.ListOffsetsRequest(topic=TOPIC, partition=0, timestamp_ms=-1)
        return self.conn.log.ListOffsets(request, timeout=10).high_watermark

    def _fetch(self) -> int:
        request = pb.FetchRequest(topic=TOPIC, partition=0, offset=BEFORE - 1, max_bytes=1 << 16, max_wait_ms=0)
        response = self.conn.log.Fetch(request, timeout=10)
        assert not response.HasField("error"), response.error
        return response.high_watermark


def test_a_resumed_deposed_leader_serves_no_stale_read(cluster):
    """After SIGSTOP of the leader, a new election and more acknowledged writes, the old leader's answers after
    SIGCONT all include those writes (or refuse the read)."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=1, replication_factor=3)
    wait_until(lambda: leader_of_partition(cluster.bootstrap), 30, what="a leader for the partition")
    produce(cluster.bootstrap, BEFORE, "before")
    old = cluster.broker(leader_of_partition(cluster.bootstrap))
    others = ",".join(b.address for b in cluster.brokers if b is not old)
    os.kill(old.proc.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: leader_of_partition(others) not in (0, None, old.node_id), 30, what="a new leader")
        produce(others, AFTER, "after")
        with StaleReadProbe(old.address) as probe:
            time.sleep(0.2)  # the first reads are queued at the frozen broker
            os.kill(old.proc.pid, signal.SIGCONT)
            wait_until(lambda: len(probe.answers) + probe.refusals >= 20, 30, what="reads answered after resume")
            time.sleep(READS_AFTER_RESUME_S)
    finally:
        os.kill(old.proc.pid, signal.SIGCONT)
    stale = [(kind, hwm) for kind, hwm in probe.answers if hwm < BEFORE + AFTER]
    assert not stale, f"{len(stale)} of {len(probe.answers)} reads were stale, e.g. {stale[:3]}"
