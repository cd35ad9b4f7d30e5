"""Goal: streams and long-polls are admitted up to grpc_long_calls_max per broker and
grpc_long_calls_per_connection_max per connection, refused beyond with OVERLOADED (retriable), released when they
end, while short calls keep being served."""
from __future__ import annotations

import grpc
import pytest

from raftbus.broker.call_limits import LongCallSlots
from raftbus.broker.grpc_server import build_server
from raftbus.client import errors
from raftbus.client.wire import raftbus_pb2 as pb
from raftbus.client.wire import raftbus_pb2_grpc as pb_grpc
from tests.component.harness import ServiceBroker
from tests.helpers import wait_until


@pytest.fixture
def served():
    broker = ServiceBroker()
    broker.create_topic("orders", partitions=1)
    slots = LongCallSlots(broker_max=2, connection_max=1)
    server, _, port = build_server("127.0.0.1:0", broker.servicers(), workers_max=8,
                                   message_bytes_max=8 << 20, long_calls=slots)
    server.start()
    # a channel of its own subchannel pool is a connection of its own (channels share connections by default)
    channels = [grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(3)]
    yield slots, [pb_grpc.LogStub(c) for c in channels], pb_grpc.AdminStub(channels[0])
    for channel in channels:
        channel.close()
    server.stop(0).wait()


def open_fetch_stream(log):
    """A FetchStream parked at the end of the empty partition: it long-polls 1 s at a time until cancelled."""
    return log.FetchStream(pb.FetchRequest(topic="orders", partition=0, offset=0, max_wait_ms=1_000))


def refused(call) -> errors.RaftbusError:
    with pytest.raises(grpc.RpcError) as caught:
        next(call) if hasattr(call, "__next__") else call()
    return errors.error_from_rpc(caught.value)


def test_streams_are_bounded_per_connection_and_per_broker(served):
    slots, (one, two, three), admin = served
    first = open_fetch_stream(one)
    wait_until(lambda: slots.held() == 1, 10, what="the first stream admitted")
    same_connection = refused(open_fetch_stream(one))
    assert type(same_connection) is errors.Overloaded and same_connection.retriable
    assert "grpc_long_calls_per_connection_max=1" in same_connection.message
    second = open_fetch_stream(two)
    wait_until(lambda: slots.held() == 2, 10, what="a stream on another connection admitted")
    full = refused(lambda: three.Fetch(pb.FetchRequest(topic="orders", partition=0, offset=0, max_wait_ms=5_000)))
    assert type(full) is errors.Overloaded and "grpc_long_calls_max=2" in full.message
    assert three.Fetch(pb.FetchRequest(topic="orders", partition=0, offset=0, max_wait_ms=0)).high_watermark == 0
    many = [pb.PartitionFetch(partition=0, offset=0)]
    full = refused(lambda: three.FetchMany(pb.FetchManyRequest(topic="orders", partitions=many, max_wait_ms=5_000)))
    assert type(full) is errors.Overloaded and "grpc_long_calls_max=2" in full.message
    assert three.FetchMany(pb.FetchManyRequest(topic="orders", partitions=many)).partitions[0].high_watermark == 0
    assert [t.name for t in admin.ListTopics(pb.ListTopicsRequest()).topics] == ["orders"]
    first.cancel()
    second.cancel()
    wait_until(lambda: slots.held() == 0, 10, what="cancelled streams released")
    again = open_fetch_stream(three)
    wait_until(lambda: slots.held() == 1, 10, what="a new stream admitted once slots are free")
    again.cancel()


def test_slots_refuse_and_release_per_peer():
    slots = LongCallSlots(broker_max=3, connection_max=2)
    slots.acquire("a", "m")
    slots.acquire("a", "m")
    with pytest.raises(errors.Overloaded):
        slots.acquire("a", "m")
    slots.acquire("b", "m")
    with pytest.raises(errors.Overloaded):
        slots.acquire("c", "m")
    slots.release("a")
    slots.acquire("c", "m")
    assert slots.held() == 3
