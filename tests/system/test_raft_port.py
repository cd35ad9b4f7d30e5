"""System test: strangers on a broker's Raft port can neither run code nor disturb the cluster."""
from __future__ import annotations

import os
import pickle
import socket
import struct
import zlib

import pytest

from raftbus.client import Admin, Producer, Reader

pytestmark = pytest.mark.system


class _RunsCommand:
    """Unpickling this would run a shell command that creates a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _send_and_wait_closed(port: int, data: bytes, timeout_s: float = 10.0) -> None:
    """Send raw bytes to the Raft port and require the broker to close the connection (it read and refused)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        try:
            sock.sendall(data)
            while sock.recv(65536):
                pass  # a hello from the broker may arrive first; it must still hang up on us
        except (ConnectionResetError, BrokenPipeError):
            pass


def test_garbage_pickles_and_forged_frames_are_rejected(cluster, tmp_path):
    """Garbage, raw and zlib-compressed pickles (pysyncobj's stock framing), forged frames and absurd lengths
    on every Raft port are refused without running code, and the cluster keeps serving."""
    marker = tmp_path / "code-ran"
    exploit = pickle.dumps(_RunsCommand(marker))
    attacks = [
        os.urandom(4096),
        struct.pack(">I", len(exploit)) + exploit,
        struct.pack(">I", len(zlib.compress(exploit))) + zlib.compress(exploit),
        b"RBRAFT1" + struct.pack(">I", 2) + os.urandom(32) + os.urandom(64),
        struct.pack(">I", 0xFFFFFFF0) + os.urandom(64),
        b"\x00" * 64 + exploit,
    ]
    for broker in cluster.brokers:
        for attack in attacks:
            _send_and_wait_closed(broker.raft_port, attack)
    assert not marker.exists(), "a payload on the Raft port was executed"
    assert all(b.alive for b in cluster.brokers)

    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("after-attack", partitions=1, replication_factor=3)
        status = admin.cluster_status()
    assert sorted(b.broker_id for b in status.brokers if b.alive) == [1, 2, 3]
    with Producer(cluster.bootstrap) as producer:
        metas = [producer.send("after-attack", f"v{i}").result(30) for i in range(10)]
    assert [m.offset for m in metas] == list(range(10))
    with Reader(cluster.bootstrap) as reader:
        values = [r.value for r in reader.iter_topic("after-attack", from_beginning=True, stop_at_end=True)]
    assert values == [f"v{i}".encode() for i in range(10)]
