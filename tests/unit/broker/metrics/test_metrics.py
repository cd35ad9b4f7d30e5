"""Goal: the pure parts of the broker's Prometheus metrics — metrics URL, gRPC method and status names, record
counts of fetch and lease answers, per-partition traffic counters, dev ports, the setting — behave as documented."""
from __future__ import annotations

import grpc
import pytest
from prometheus_client import CollectorRegistry

from raftbus.broker.main import dev_metrics_ports
from raftbus.broker.metrics.address import metrics_url
from raftbus.broker.metrics.calls import method_of, status_name
from raftbus.broker.metrics.traffic import Traffic, fetched_records, packed_messages
from raftbus.broker.settings import load_settings
from raftbus.client import errors
from raftbus.client.queues.codec import MESSAGE_HEADER, pack_messages
from raftbus.client.records import encode_stored_batch
from raftbus.client.wire import queues_pb2 as qpb
from raftbus.client.wire import raftbus_pb2 as pb


@pytest.mark.parametrize("listen, client, port, url", [
    ("", "h:7070", 0, ""),
    ("127.0.0.1:0", "127.0.0.1:7070", 41234, "http://127.0.0.1:41234/metrics"),
    ("0.0.0.0:9570", "broker-0.raftbus:7070", 9570, "http://broker-0.raftbus:9570/metrics"),
    ("[::]:9570", "[fd00::1]:7070", 9570, "http://[fd00::1]:9570/metrics"),
    ("10.0.0.5:9570", "broker-0:7070", 9570, "http://10.0.0.5:9570/metrics"),
])
def test_metrics_url_names_a_reachable_host_and_the_bound_port(listen, client, port, url):
    assert metrics_url(listen, client, port) == url


def test_method_and_status_names():
    assert method_of("/raftbus.v1.Log/Produce") == ("raftbus.v1.Log", "Produce")
    assert method_of("garbage") == ("unknown", "garbage")

    class Context:
        def __init__(self, code):
            self._code = code

        def code(self):
            return self._code
    assert status_name(Context(None)) == "OK"
    assert status_name(Context(grpc.StatusCode.NOT_FOUND)) == "NOT_FOUND"


def test_record_counts_of_fetch_and_lease_answers():
    batches = encode_stored_batch(0, 3, 1, 1, b"abc") + encode_stored_batch(3, 4, 2, 2, b"defg")
    assert fetched_records(batches) == 7 and fetched_records(b"") == 0
    message = bytes(MESSAGE_HEADER.size) + b"payload"
    assert packed_messages(pack_messages([(1, message), (2, message)])) == 2


def value(registry, name, **labels):
    return registry.get_sample_value(name, labels) or 0


def test_traffic_counts_successful_answers_once_per_partition():
    registry = CollectorRegistry()
    traffic = Traffic(registry)
    request = pb.ProduceRequest(topic="t", partition=1, record_count=3, records=b"x" * 30)
    traffic.produced(request, pb.ProduceResponse(base_offset=0))
    traffic.produced(request, pb.ProduceResponse(base_offset=0, duplicate=True))
    traffic.produced(request, pb.ProduceResponse(error=pb.Error(code="NOT_LEADER")))
    assert value(registry, "raftbus_partition_records_in_total", topic="t", partition="1") == 3
    assert value(registry, "raftbus_partition_bytes_in_total", topic="t", partition="1") == 30

    batches = encode_stored_batch(0, 2, 1, 1, b"ab")
    traffic.fetched(pb.FetchRequest(topic="t", partition=1), pb.FetchResponse(batches=batches))
    traffic.fetched(pb.FetchRequest(topic="t", partition=1), pb.FetchResponse())
    assert value(registry, "raftbus_partition_records_out_total", topic="t", partition="1") == 2
    assert value(registry, "raftbus_partition_bytes_out_total", topic="t", partition="1") == len(batches)

    enqueue = qpb.EnqueueRequest(topic="q", partition=0, messages=[qpb.EnqueueMessage(record=b"12"),
                                                                   qpb.EnqueueMessage(record=b"345")])
    traffic.enqueued(enqueue, qpb.EnqueueResponse(results=[qpb.EnqueueResult(message_id=1),
                                                           qpb.EnqueueResult(message_id=2, duplicate=True)]))
    assert value(registry, "raftbus_partition_records_in_total", topic="q", partition="0") == 1
    assert value(registry, "raftbus_partition_bytes_in_total", topic="q", partition="0") == 2


def test_dev_gives_each_broker_a_metrics_port_unless_off():
    assert dev_metrics_ports(3, 9570) == [9570, 9571, 9572]
    assert dev_metrics_ports(2, 0) == [None, None]


def test_metrics_listen_setting_is_off_by_default_and_validated():
    assert load_settings().metrics.metrics_listen == ""
    assert load_settings(metrics_listen="127.0.0.1:9570").metrics.metrics_listen == "127.0.0.1:9570"
    with pytest.raises(errors.InvalidArgument):
        load_settings(metrics_listen="no-port")
