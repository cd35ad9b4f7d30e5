"""System test: a real 3-broker cluster with mutual TLS on the Raft port replicates, survives a leader kill, and
turns away a peer whose certificate another CA signed."""
from __future__ import annotations

import ssl

import pytest

from raftbus.broker.raft.cluster_secret import DEFAULT_CLUSTER_ID, DEFAULT_SECRET, raft_key
from raftbus.broker.tls_dev import write_dev_pki
from raftbus.client import Admin, Producer, Reader
from tests.helpers import LocalCluster, wait_until
from tests.raft_peer import RaftPeer
from tests.system.conftest import wait_cluster_ready
from tests.system.raft_tls import client_context, enable_raft_tls

pytestmark = pytest.mark.system

TOPIC = "tls-orders"


@pytest.fixture
def tls_cluster(tmp_path):
    cluster = LocalCluster(tmp_path, brokers=3)
    cluster.pki = enable_raft_tls(cluster, tmp_path, [1, 2, 3])
    try:
        cluster.start()
        wait_cluster_ready(cluster)
        yield cluster
    finally:
        cluster.stop()


def produce(bootstrap: str, values: list[bytes]) -> list[int]:
    with Producer(bootstrap) as producer:
        return [f.result(60).offset for f in [producer.send(TOPIC, v) for v in values]]


def read_all(bootstrap: str) -> list[bytes]:
    with Reader(bootstrap) as reader:
        return [r.value for r in reader.iter_topic(TOPIC, from_beginning=True, stop_at_end=True)]


def test_a_tls_cluster_replicates_and_survives_a_leader_kill(tls_cluster):
    """Records produced over a Raft port under mutual TLS are read back, and again after the partition leader is
    killed -9 and a new leader is elected among the remaining TLS peers."""
    cluster = tls_cluster
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=1, replication_factor=3)
        leader = wait_until(lambda: admin.describe_topic(TOPIC).partitions[0].leader_id, 30, what="a leader")
        wait_until(lambda: len(admin.describe_topic(TOPIC).partitions[0].isr) == 3, 30, what="3 in sync")
    first = [f"before-{i}".encode() for i in range(50)]
    assert produce(cluster.bootstrap, first) == list(range(50))

    cluster.brokers[leader - 1].kill()
    survivors = ",".join(b.address for b in cluster.brokers if b.alive)
    with Admin(survivors) as admin:
        wait_until(lambda: admin.describe_topic(TOPIC).partitions[0].leader_id not in (None, 0, leader), 60,
                   what="a new leader")
    second = [f"after-{i}".encode() for i in range(50)]
    assert produce(survivors, second) == list(range(50, 100))
    assert read_all(survivors) == first + second


def test_a_certificate_from_another_ca_is_refused(tls_cluster, tmp_path):
    """A peer with the right cluster secret but a certificate signed by another CA never gets past TLS."""
    stranger = write_dev_pki(tmp_path / "other-pki", [1])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cert, key = stranger.broker(1)
    context.load_cert_chain(str(cert), str(key))
    context.load_verify_locations(cafile=str(tls_cluster.pki.ca_file))  # trusts the cluster; is not trusted
    key_bytes = raft_key(DEFAULT_SECRET, DEFAULT_CLUSTER_ID)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        peer = RaftPeer(tls_cluster.brokers[1].raft_port, 1, key_bytes, tls=context)
        peer.handshake()
    # and the genuine certificate of node 1 with the same secret does get through
    genuine = RaftPeer(tls_cluster.brokers[1].raft_port, 1, key_bytes, tls=client_context(tls_cluster.pki, 1))
    genuine.handshake().close()
    assert all(b.alive for b in tls_cluster.brokers)
