"""System test: strangers on a broker's Raft port can neither run code nor disturb the cluster."""
from __future__ import annotations

import os
import pickle
import socket
import struct
import zlib

import pytest

from raftbus.broker.context import METADATA_GROUP
from raftbus.broker.raft.cluster_secret import DEFAULT_CLUSTER_ID, DEFAULT_SECRET, raft_key
from raftbus.client import Admin, Producer, Reader
from tests.helpers import LocalCluster, wait_until
from tests.raft_peer import RaftPeer
from tests.system.conftest import wait_cluster_ready
from tests.system.raft_tls import client_context, enable_raft_tls

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


# ---------------------------------------------------------------------------------------------- with the secret
VACANT = 1  # a node id in every broker's peer table that no process runs: the forger speaks as it


@pytest.fixture(params=["plaintext", "tls"])
def vacant_peer_cluster(request, tmp_path):
    """Brokers 2, 3 and 4 of a 4-node peer table (Raft mTLS on in the "tls" case); node 1 is never started, so a
    forger holding the cluster key (and node 1's certificate) can speak as node 1 without being displaced."""
    cluster = LocalCluster(tmp_path, brokers=4)
    cluster.brokers = [b for b in cluster.brokers if b.node_id != VACANT]
    cluster.tls = None
    if request.param == "tls":
        pki = enable_raft_tls(cluster, tmp_path, [1, 2, 3, 4])
        cluster.tls = client_context(pki, VACANT)
    try:
        cluster.start()
        wait_cluster_ready(cluster)
        yield cluster
    finally:
        cluster.stop()


def _metadata_tail(peers: dict[int, RaftPeer]) -> tuple[int, dict]:
    """(leader id, its latest idle heartbeat to node 1 on the metadata group: nothing uncommitted in flight)."""
    while True:
        for broker_id, peer in peers.items():
            for channel, message in peer.receive(timeout_s=30):
                if channel == METADATA_GROUP and message.get("type") == "append_entries" \
                        and not message.get("entries") and message["prevLogIdx"] == message["commit_index"]:
                    return broker_id, message


def test_forged_entries_and_pickles_with_the_right_secret_run_no_code(vacant_peer_cluster, tmp_path):
    """A peer with the cluster key (and a valid certificate under TLS) forges what pysyncobj used to unpickle: a
    chunked `transmission` entry, and committed membership, version and regular entries whose payloads are
    pickles of os.system. Every broker decodes them with raftbus's codec instead: no code runs, the forged
    entries are applied as no-ops, and the cluster keeps serving."""
    cluster = vacant_peer_cluster
    marker = tmp_path / "code-ran"
    exploit = pickle.dumps(_RunsCommand(marker))
    key = raft_key(DEFAULT_SECRET, DEFAULT_CLUSTER_ID)
    peers = {b.node_id: RaftPeer(b.raft_port, VACANT, key, tls=cluster.tls).handshake() for b in cluster.brokers}
    leader, beat = _metadata_tail(peers)
    last, last_term, term = beat["prevLogIdx"], beat["prevLogTerm"], beat["term"] + 1
    forged_entries = {
        "type": "append_entries", "term": term, "commit_index": last + 3, "prevLogIdx": last,
        "prevLogTerm": last_term,
        "entries": [(b"\x02" + exploit, last + 1, term), (b"\x03" + exploit, last + 2, term),
                    (b"\x00" + exploit, last + 3, term)]}
    transmission = [{"type": "append_entries", "term": term, "commit_index": last, "prevLogIdx": last,
                     "prevLogTerm": last_term, "transmission": step, "data": part}
                    for step, part in (("start", exploit[:8]), ("finish", exploit[8:]))]
    followers = [broker_id for broker_id in peers if broker_id != leader]
    for broker_id in followers:
        peers[broker_id].send(*[(METADATA_GROUP, m) for m in transmission])
        peers[broker_id].send((METADATA_GROUP, forged_entries))
    peers[leader].send(*[(METADATA_GROUP, m) for m in transmission])

    def applied_as_no_ops():
        logs = [(tmp_path / f"broker-{b}.log").read_text() for b in followers]
        return all("ignored a committed entry of type 2" in text and "ignored a committed entry of type 3" in text
                   and "refused a message from node 1" in text for text in logs)
    wait_until(applied_as_no_ops, 30, what="the forged entries applied as no-ops on every follower")
    for peer in peers.values():
        peer.close()
    assert not marker.exists(), "a pickle sent with the cluster secret was executed"
    assert all(b.alive for b in cluster.brokers)

    wait_cluster_ready(cluster)
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("after-forgery", partitions=1, replication_factor=3)
    with Producer(cluster.bootstrap) as producer:
        metas = [producer.send("after-forgery", f"v{i}").result(60) for i in range(10)]
    assert [m.offset for m in metas] == list(range(10))
    with Reader(cluster.bootstrap) as reader:
        values = [r.value for r in reader.iter_topic("after-forgery", from_beginning=True, stop_at_end=True)]
    assert values == [f"v{i}".encode() for i in range(10)]
    assert not marker.exists()
