"""System test of the descriptors no client can take, on real brokers: with its descriptor limit lowered to 1,024
(`prlimit`), a broker held by 1,500 idle connections to its client port (each past its HTTP/2 handshake, so no
handshake timeout closes it) keeps at most `grpc_connections_max` of them and closes the rest at once, so its Raft groups keep running: the cluster creates a topic with a replica on
that broker, produces to every partition and reads every record back through connections opened before, no Raft
group stops (`raftbus_raft_groups_stopped`), and once the idle connections are gone new clients are served."""
from __future__ import annotations

import os
import resource
import socket

import pytest

from raftbus.client import Admin, Producer, Reader
from tests.helpers import wait_until
from tests.system.conftest import running_cluster
from tests.system.test_metrics import metrics_urls, scrape, total

pytestmark = pytest.mark.system

CONNECTIONS_MAX = 300
IDLE = 1500
DESCRIPTORS = 1024
ENV = {"RAFTBUS_GRPC_CONNECTIONS_MAX": str(CONNECTIONS_MAX), "RAFTBUS_METRICS_LISTEN": "127.0.0.1:0"}
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # and an empty SETTINGS


def idle_connection(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        sock.sendall(HTTP2_PREFACE)
    except OSError:
        pass  # closed at once: beyond the bound
    return sock


def client_sockets(pid: int) -> int:
    """Descriptors of process `pid` that are sockets."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


def test_idle_connections_beyond_the_bound_are_closed_and_raft_groups_keep_running(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft >= IDLE + 512, "this test needs a descriptor limit above the idle connections it opens"
    with running_cluster(tmp_path, env=ENV) as cluster:
        target = cluster.broker(1)
        resource.prlimit(target.proc.pid, resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))
        urls = metrics_urls(cluster.bootstrap)
        with Admin(cluster.bootstrap) as admin, Producer(cluster.bootstrap, linger_ms=0) as producer, \
                Reader(cluster.bootstrap) as reader:
            admin.create_topic("warm", partitions=3, replication_factor=3)
            for p in range(3):  # every client holds a connection to every broker before the flood
                producer.send("warm", b"w", partition=p).result(30)
                wait_until(lambda: reader.fetch("warm", p, 0).records, 30, what="warm-up read")
            idle = []
            try:
                for _ in range(IDLE):
                    idle.append(idle_connection(target.grpc_port))
                wait_until(lambda: client_sockets(target.proc.pid) <= CONNECTIONS_MAX + 100, 5,
                           what="the connections beyond grpc_connections_max closed")
                admin.create_topic("during", partitions=3, replication_factor=3)
                sent = {p: producer.send("during", b"record-%d" % p, partition=p).result(20).offset for p in range(3)}
                for p, offset in sent.items():
                    records = wait_until(lambda: reader.fetch("during", p, offset).records, 10, what="a read back")
                    assert records[0].value == b"record-%d" % p
                assert target.alive and total([scrape(url) for url in urls], "raftbus_raft_groups_stopped") == 0
            finally:
                for sock in idle:
                    sock.close()
        with Admin(cluster.bootstrap) as admin, Producer(cluster.bootstrap, linger_ms=0) as producer:
            for p in range(3):
                assert producer.send("during", b"after", partition=p).result(60).offset == sent[p] + 1
            assert all(b.alive for b in admin.cluster_status().brokers)
        assert total([scrape(url) for url in urls], "raftbus_raft_groups_stopped") == 0
