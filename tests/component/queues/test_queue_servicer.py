"""Component tests: the Queue servicer's packed lease answers and packed acks, through a real channel on port 0,
over the queue services with in-process replication."""
from __future__ import annotations

import grpc
import pytest

from raftbus.broker.grpc_server import build_server
from raftbus.broker.queues.servicer import queue_servicers
from raftbus.client.queues.ids import message_id
from raftbus.client.queues.messages import leased_messages
from raftbus.client.queues.codec import lease_refs_of, pack_leases
from raftbus.client.queues.admin import packed_errors
from raftbus.client.wire import queues_pb2 as qpb
from raftbus.client.wire import queues_pb2_grpc as qpb_grpc
from tests.component.queue_harness import QueueBroker


@pytest.fixture
def served():
    broker = QueueBroker()
    broker.create("jobs", partitions=2)
    server, _, port = build_server("127.0.0.1:0", queue_servicers(broker.queues, broker.dead_letters),
                                   workers_max=4, message_bytes_max=8 << 20)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield broker, qpb_grpc.QueueStub(channel)
    channel.close()
    server.stop(0).wait()


def lease(stub, partition=0, max_messages=10, packed=True):
    return stub.Lease(qpb.LeaseRequest(topic="jobs", partition=partition, max_messages=max_messages,
                                       visibility_ms=5_000, packed=packed))


def test_a_packed_lease_answer_holds_the_same_messages_as_a_proto_one(served):
    """Goal: packed and proto lease answers describe the same messages, in priority order."""
    broker, stub = served
    broker.put("jobs", b"late", priority=5, group="acme.web")
    broker.put("jobs", b"first", priority=1, idempotency_key="k-1")
    packed = lease(stub, max_messages=1)
    proto = lease(stub, max_messages=1, packed=False)
    assert not packed.messages and not proto.packed_messages
    first, = leased_messages("jobs", 0, packed)
    second, = leased_messages("jobs", 0, proto)
    assert (first.value, first.priority, first.idempotency_key, first.state, first.delivery_count) == \
           (b"first", 1, "k-1", "in_flight", 1)
    assert (second.value, second.group, second.message_id) == (b"late", "acme.web", message_id(0, 1))
    assert first.lease_deadline_ms == broker.clock.now_ms() + 5_000
    assert lease(stub).packed_messages == b""


def test_a_packed_ack_answers_only_the_refused_leases(served):
    """Goal: a packed ack acks every valid lease in one command and names each refusal by its index."""
    broker, stub = served
    ids = broker.put("jobs", b"a", b"b", b"c")
    answer = lease(stub)
    refs = lease_refs_of(answer.packed_messages)
    stale = pack_leases([(ids[1], 7)])
    never = pack_leases([(message_id(0, 99), 1)])
    request = qpb.AckRequest(topic="jobs", partition=0, packed_leases=refs[:12] + stale + refs[24:] + never)
    response = stub.Ack(request)
    assert not response.results
    assert [(f.index, f.error.code) for f in response.failures] == [(1, "LEASE_LOST"), (3, "UNKNOWN_MESSAGE")]
    assert broker.replica("jobs").state_machine.counts() == (0, 0, 1, 0)
    again = stub.Ack(qpb.AckRequest(topic="jobs", partition=0, packed_leases=refs[12:24]))
    assert list(again.failures) == [] and broker.replica("jobs").state_machine.counts() == (0, 0, 0, 0)


def test_a_packed_ack_with_ids_of_another_partition_or_no_seq_refuses_those(served):
    """Goal: ids that are not messages of the partition get per-item errors, as in an unpacked ack."""
    broker, stub = served
    broker.put("jobs", b"a")
    refs = lease_refs_of(lease(stub).packed_messages)
    packed = refs + pack_leases([(message_id(1, 1), 1), (message_id(0, 0), 1)])
    response = stub.Ack(qpb.AckRequest(topic="jobs", partition=0, packed_leases=packed))
    errors = packed_errors(response, 3)
    assert errors[0] is None and [e.code for e in errors[1:]] == ["UNKNOWN_MESSAGE", "INVALID_ARGUMENT"]
    broker.put("jobs", b"b")
    refs = lease_refs_of(lease(stub).packed_messages)
    no_seq = pack_leases([(message_id(0, 0), 1)])  # of this partition: the whole batch takes the packed path
    response = stub.Ack(qpb.AckRequest(topic="jobs", partition=0, packed_leases=refs + no_seq))
    assert [(f.index, f.error.code) for f in response.failures] == [(1, "INVALID_ARGUMENT")]
    assert broker.replica("jobs").state_machine.counts() == (0, 0, 0, 0)


@pytest.mark.parametrize("request_fields", [
    {"packed_leases": b"\x00" * 13},
    {"packed_leases": pack_leases([(message_id(0, 1), 1)]), "leases": [qpb.LeaseRef(message_id=1, delivery_count=1)]},
])
def test_malformed_packed_acks_are_invalid_arguments(served, request_fields):
    """Goal: packed leases that are not whole references, or that come with unpacked ones, are refused whole."""
    broker, stub = served
    broker.put("jobs", b"a")
    lease(stub)
    with pytest.raises(grpc.RpcError) as failure:
        stub.Ack(qpb.AckRequest(topic="jobs", partition=0, **request_fields))
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert broker.replica("jobs").state_machine.counts() == (0, 0, 1, 0)
