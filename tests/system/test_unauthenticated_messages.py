"""System test of what an unauthenticated caller costs a real broker (TLS and auth on): a 60 MiB Produce with an
unknown token, and one with no credentials, are refused UNAUTHENTICATED while the broker's peak resident memory
(VmHWM) grows by far less than the message, because the message is never read in full nor parsed; the admin's
small produce still succeeds."""
from __future__ import annotations

import grpc
import pytest

from raftbus.client import Admin, Producer, errors
from raftbus.client.credentials import Credentials
from raftbus.client.wire import raftbus_pb2 as pb
from raftbus.client.wire import raftbus_pb2_grpc as pb_grpc
from tests.system.conftest import running_cluster

pytestmark = pytest.mark.system

MESSAGE_BYTES = 60 << 20
PEAK_GROWTH_BYTES_MAX = 24 << 20


def peak_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_an_unauthenticated_60_mib_message_is_refused_without_being_read(tmp_path):
    with running_cluster(tmp_path, secure=True) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic("orders", partitions=1, replication_factor=3)
        target = cluster.broker(1)
        request = pb.ProduceRequest(topic="orders", partition=0, record_count=1, records=b"x" * MESSAGE_BYTES)
        before = peak_rss_bytes(target.proc.pid)
        for credentials in ({"token": "rbt_" + "A" * 43}, {}):
            channel = Credentials.of(environ={}, tls_ca=cluster.secure.ca, **credentials).channel(
                target.address, [("grpc.max_send_message_length", MESSAGE_BYTES + (1 << 20))])
            with channel:
                with pytest.raises(grpc.RpcError) as failure:
                    pb_grpc.LogStub(channel).Produce(request, timeout=30)
            assert isinstance(errors.error_from_rpc(failure.value), errors.Unauthenticated)
        growth = peak_rss_bytes(target.proc.pid) - before
        assert growth < PEAK_GROWTH_BYTES_MAX, growth
        with Producer(cluster.bootstrap, linger_ms=0) as producer:
            assert producer.send("orders", b"admin's", partition=0).result(30).offset == 0
