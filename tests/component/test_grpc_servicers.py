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


@pytest.fixture
def served_many():
    broker = ServiceBroker(fetch_many_partitions_max=4)
    broker.create_topic("orders", partitions=3)
    server, _, port = build_server("127.0.0.1:0", broker.servicers(), workers_max=8, message_bytes_max=8 << 20)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield broker, pb_grpc.LogStub(channel)
    channel.close()
    server.stop(0).wait()


def fetch_many(log, positions, max_bytes=1 << 20, max_wait_ms=0, **fields):
    return log.FetchMany(pb.FetchManyRequest(
        topic="orders", max_bytes=max_bytes, max_wait_ms=max_wait_ms, **fields,
        partitions=[pb.PartitionFetch(partition=p, offset=o) for p, o in positions]), timeout=10)


def test_fetch_many_answers_every_partition_in_order_and_refuses_only_those_it_cannot_serve(served_many):
    """Goal: one FetchMany answers each partition as Fetch would, in request order, with the log start and high
    watermark resolved for -2 and -1; a partition this broker does not lead is answered NOT_LEADER with the
    leader's address, one at an offset past its log is answered OFFSET_OUT_OF_RANGE with its offsets, and the
    other partitions are read all the same."""
    broker, log = served_many
    broker.produce("orders", 0, [b"a0", b"a1"])
    broker.produce("orders", 2, [b"c0"])
    broker.replica("orders", 1).group.set_leader(2)
    answer = fetch_many(log, [(2, -2), (1, 0), (0, 0)])
    assert [a.partition for a in answer.partitions] == [2, 1, 0]
    two, one, zero = answer.partitions
    assert [r.value for r in decode_fetched("orders", 2, two.batches)] == [b"c0"] and two.high_watermark == 1
    assert one.error.code == "NOT_LEADER" and one.error.leader_address == "127.0.0.1:9002" and not one.batches
    assert [r.value for r in decode_fetched("orders", 0, zero.batches)] == [b"a0", b"a1"]
    answer = fetch_many(log, [(0, 99), (2, -1)])
    out, latest = answer.partitions
    assert out.error.code == "OFFSET_OUT_OF_RANGE" and (out.log_start_offset, out.high_watermark) == (0, 2)
    assert not latest.HasField("error") and not latest.batches and latest.high_watermark == 1


def test_fetch_many_keeps_to_its_byte_cap_and_long_polls_until_any_partition_has_records(served_many):
    """Goal: partitions past the call's max_bytes are answered without batches (the first one with records still
    gets one batch); a call at the end of every partition waits until one of them is appended to, and returns
    at its max_wait_ms when none is."""
    import threading
    import time

    broker, log = served_many
    broker.produce("orders", 0, [b"x" * 100])
    broker.produce("orders", 2, [b"y" * 100])
    capped = fetch_many(log, [(0, 0), (2, 0)], max_bytes=1)
    assert capped.partitions[0].batches and not capped.partitions[1].batches
    assert capped.partitions[1].high_watermark == 1
    started = time.monotonic()
    empty = fetch_many(log, [(0, 1), (1, 0), (2, 1)], max_wait_ms=300)
    assert time.monotonic() - started >= 0.25 and not any(a.batches for a in empty.partitions)
    later = threading.Timer(0.3, lambda: broker.produce("orders", 1, [b"late"]))
    later.start()
    try:
        started = time.monotonic()
        woken = fetch_many(log, [(0, 1), (1, 0), (2, 1)], max_wait_ms=8_000)
    finally:
        later.join()
    assert time.monotonic() - started < 6
    assert [r.value for r in decode_fetched("orders", 1, woken.partitions[1].batches)] == [b"late"]


@pytest.mark.parametrize("positions, words", [
    ([], "names no partition"),
    ([(0, 0), (0, 1)], "more than once"),
    ([(0, 0), (1, 0), (2, 0), (3, 0), (4, 0)], "fetch_many_partitions_max=4"),
    ([(0, -3)], "-2 (the log start)"),
])
def test_fetch_many_refuses_bad_requests_whole(served_many, positions, words):
    """Goal: no partition, a repeated partition, more partitions than fetch_many_partitions_max or an offset below
    -2 is INVALID_ARGUMENT for the whole call, with a message naming the rule."""
    _, log = served_many
    with pytest.raises(grpc.RpcError) as caught:
        fetch_many(log, positions)
    err = errors.error_from_rpc(caught.value)
    assert type(err) is errors.InvalidArgument and words in err.message
