"""Component tests: the gRPC servicers over in-process replication, called through a real channel on port 0."""
from __future__ import annotations

import grpc
import pytest

from raftbus.broker.grpc_server import build_server
from raftbus.client import errors
from raftbus.client.records import decode_fetched, encode_batch
from raftbus.client.wire import raftbus_pb2 as pb
from raftbus.client.wire import raftbus_pb2_grpc as pb_grpc
from tests.component.harness import PRODUCER, ServiceBroker


@pytest.fixture
def served():
    broker = ServiceBroker()
    broker.create_topic("orders", partitions=2)
    server, health, port = build_server("127.0.0.1:0", broker.servicers(),
                                        workers_max=8, message_bytes_max=8 << 20)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield broker, pb_grpc.LogStub(channel), pb_grpc.AdminStub(channel), channel
    channel.close()
    server.stop(0).wait()


def produce_request(request_id, values, sequence=0, partition=0, topic="orders"):
    blob, count, max_ts = encode_batch([(1, None, v, ()) for v in values])
    return pb.ProduceRequest(request_id=request_id, topic=topic, partition=partition, producer_id=PRODUCER,
                             base_sequence=sequence, record_count=count, max_timestamp_ms=max_ts, records=blob)


def test_produce_stream_answers_each_request_and_survives_a_bad_one(served):
    """Goal: the bidi produce stream acknowledges each batch in order and answers a bad one with an error entry."""
    _, log, _, _ = served
    requests = [produce_request(1, [b"a", b"b"]), produce_request(2, [b"c"], sequence=2),
                produce_request(3, [b"x"], topic="missing"), produce_request(4, [b"d"], sequence=3)]
    answers = list(log.ProduceStream(iter(requests)))
    assert [a.request_id for a in answers] == [1, 2, 3, 4]
    assert [a.base_offset for a in answers if not a.HasField("error")] == [0, 2, 3]
    assert answers[2].error.code == "UNKNOWN_TOPIC"


def test_fetch_stream_follows_the_log_until_cancelled(served):
    """Goal: the server-streaming fetch sends what is there, then each new batch as it is committed."""
    broker, log, _, _ = served
    broker.produce("orders", 1, [b"first"])
    stream = log.FetchStream(pb.FetchRequest(topic="orders", partition=1, offset=0, max_bytes=1 << 20,
                                             max_wait_ms=5_000))
    first = next(stream)
    broker.produce("orders", 1, [b"second"], sequence=1)
    second = next(stream)
    stream.cancel()
    values = [r.value for r in decode_fetched("orders", 1, first.batches)]
    values += [r.value for r in decode_fetched("orders", 1, second.batches, 1)]
    assert values == [b"first", b"second"]


def test_a_failed_call_carries_its_stable_code_and_leader_hint(served):
    """Goal: errors cross gRPC as a status plus trailing metadata the client turns back into the same class."""
    broker, log, admin, _ = served
    with pytest.raises(grpc.RpcError) as caught:
        log.Fetch(pb.FetchRequest(topic="orders", partition=0, offset=99))
    err = errors.error_from_rpc(caught.value)
    assert type(err) is errors.OffsetOutOfRange and caught.value.code() == grpc.StatusCode.OUT_OF_RANGE
    broker.metadata_group.set_leader(2)
    with pytest.raises(grpc.RpcError) as caught:
        admin.CreateTopic(pb.CreateTopicRequest(name="other"))
    err = errors.error_from_rpc(caught.value)
    assert type(err) is errors.NotLeader and (err.leader_id, err.leader_address) == (2, "127.0.0.1:9002")


def test_malformed_bytes_are_an_invalid_argument_not_a_crash(served):
    """Goal: a request that is not a valid protobuf message gets a clean error status and the server lives on."""
    _, _, admin, channel = served
    call = channel.unary_unary("/raftbus.v1.Log/Produce")
    with pytest.raises(grpc.RpcError) as caught:
        call(b"\xff\xff\xff\xff garbage", timeout=5)
    assert caught.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT)
    assert admin.ListTopics(pb.ListTopicsRequest()).topics[0].name == "orders"


def test_explicit_zero_partitions_or_replicas_are_refused_and_unset_ones_take_the_defaults(served):
    """Goal: CreateTopic tells "not given" (the broker's default) from an explicit bad value (a typed error)."""
    broker, _, admin, _ = served
    for request, error in ((pb.CreateTopicRequest(name="zero", partitions=0), errors.InvalidPartitions),
                           (pb.CreateTopicRequest(name="zero", replication_factor=0), errors.InvalidReplicationFactor),
                           (pb.CreateTopicRequest(name="zero", partitions=-2), errors.InvalidPartitions)):
        with pytest.raises(grpc.RpcError) as caught:
            admin.CreateTopic(request)
        assert type(errors.error_from_rpc(caught.value)) is error
    assert "zero" not in [t.name for t in admin.ListTopics(pb.ListTopicsRequest()).topics]
    created = admin.CreateTopic(pb.CreateTopicRequest(name="defaults")).topic
    assert len(created.partitions) == broker.settings.topics.default_partitions
