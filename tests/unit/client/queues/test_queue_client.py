"""Goal: the SDK's queue pieces route, batch and decode correctly — partition choice, per-partition settlement
batches tagged for retries, per-message errors as exceptions, messages and statistics — against a fake broker."""
import threading

import pytest

from raftbus.client import errors
from raftbus.client.queues.consumer import _Settlements
from raftbus.client.queues.ids import message_id, split_message_id
from raftbus.client.queues.messages import GroupQueueStats, Message, PartitionQueueStats, QueueStats
from raftbus.client.queues.producer import QueueStubs, queue_partition
from raftbus.client.murmur2 import partition_for_key
from raftbus.client.queues.codec import MESSAGE_HEADER, pack_messages, unpack_leases
from raftbus.client.queues.admin import Queues
from raftbus.client.records import encode_batch
from raftbus.client.wire import queues_pb2 as qpb
from raftbus.client.wire import raftbus_pb2 as pb


class FakeChannel:
    """Answers Queue RPCs from a handler table; records every request."""

    def __init__(self, handlers):
        self.handlers = handlers
        self.requests = []
        self.lock = threading.Lock()

    def unary_unary(self, method, request_serializer=None, response_deserializer=None, **_):
        name = method.rsplit("/", 1)[-1]

        def call(request, timeout=None):
            with self.lock:
                self.requests.append((name, request))
            return self.handlers[name](request)

        return call

    unary_stream = stream_unary = stream_stream = unary_unary


class FakeConnection:
    def __init__(self, channel):
        self.address = "fake:1"
        self.channel = channel


class FakeRouter:
    request_timeout_s = 1.0

    def __init__(self, channel, partitions=3):
        self.connection_ = FakeConnection(channel)
        self.partitions = partitions

    def call_partition(self, topic, partition, fn):
        return fn(self.connection_)

    def partitions_for(self, topic):
        return self.partitions

    def topic_kind(self, topic):
        return "stream" if topic.startswith("stream") else "queue"

    def connection(self, address):
        return self.connection_

    def leader_address(self, topic, partition):
        return "fake:1"

    def close(self):
        pass


def leased(mid, count=1, value=b"v", **fields):
    record = encode_batch([(7, b"k", value, (("h", b"1"),))])[0]
    return qpb.QueueMessage(message_id=mid, partition=mid >> 40, state="in_flight", delivery_count=count,
                            record=record, **fields)


def ack_answers(request):
    """Packed acks succeed except for message ids with seq 13 (lease lost), which are listed as failures."""
    return qpb.QueueBatchResponse(failures=[
        qpb.QueueItemFailure(index=i, error=pb.Error(code="LEASE_LOST", message="gone"))
        for i, (mid, _) in enumerate(unpack_leases(request.packed_leases)) if mid & 0xFFFFFFFFFF == 13])


@pytest.mark.parametrize("group, key, record_key, expected", [
    ("acme", None, None, partition_for_key(b"acme", 8)),
    (None, "order-1", None, partition_for_key(b"order-1", 8)),
    ("acme", "order-1", b"k", partition_for_key(b"acme", 8)),
    (None, None, b"k", partition_for_key(b"k", 8)),
    (None, None, None, None),
])
def test_queue_partition_prefers_group_then_idempotency_key_then_record_key(group, key, record_key, expected):
    assert queue_partition(8, group, key, record_key) == expected


def test_message_ids_carry_the_partition():
    assert split_message_id(message_id(5, 77)) == (5, 77)
    for bad in (0, -1, 5 << 40, 1 << 63, "7"):
        with pytest.raises(errors.InvalidArgument):
            split_message_id(bad)


def test_message_decodes_its_record_and_refuses_to_settle_without_a_lease():
    m = Message.from_proto("jobs", leased(message_id(1, 2), priority=3, group="acme", last_error="x"))
    assert (m.partition, m.key, m.value, m.headers, m.timestamp_ms, m.priority, m.group) == \
           (1, b"k", b"v", (("h", b"1"),), 7, 3, "acme")
    assert m.to_dict()["value"] == "v" and "settler" not in m.to_dict() and m.id == m.message_id
    with pytest.raises(errors.InvalidArgument):
        m.ack()


def test_settlements_batch_per_partition_with_a_settler_id_and_sequences():
    channel = FakeChannel({"Ack": ack_answers})
    router = FakeRouter(channel)
    settlements = _Settlements(router, QueueStubs(router), linger_s=0.05, timeout_s=1.0)
    messages = [Message.from_proto("jobs", leased(message_id(p, seq)), settlements)
                for p, seq in ((0, 1), (1, 1), (0, 2), (0, 13))]
    futures = [m.ack() for m in messages]
    assert [f.exception(5) is None for f in futures] == [True, True, True, False]
    assert isinstance(futures[3].exception(), errors.LeaseLost)
    more = Message.from_proto("jobs", leased(message_id(0, 3)), settlements).ack()
    assert more.result(5) is None
    settlements.close(1)
    acks = [r for name, r in channel.requests if name == "Ack"]
    assert sorted((r.partition, len(unpack_leases(r.packed_leases))) for r in acks[:2]) == [(0, 3), (1, 1)]
    assert all(not r.leases for r in acks)
    assert {r.settler_id for r in acks} == {settlements.settler_id} and len(settlements.settler_id) == 16
    assert [r.sequence for r in acks if r.partition == 0] == [1, 2]


class StalledPartitionRouter(FakeRouter):
    """Calls to partition 0 wait until `release` is set (its leader is gone); the others are answered at once."""

    def __init__(self, channel):
        super().__init__(channel)
        self.release = threading.Event()

    def call_partition(self, topic, partition, fn):
        if partition == 0:
            assert self.release.wait(10)
        return fn(self.connection_)


def test_a_partition_without_a_leader_holds_up_only_its_own_settlements():
    """An ack of partition 1 is answered while partition 0's ack waits for its leader; a later extend of
    partition 1 as well; partition 0's own requests stay in order behind the one waiting."""
    channel = FakeChannel({"Ack": ack_answers, "Extend": lambda r: qpb.QueueBatchResponse(
        results=[qpb.QueueItemResult(lease_deadline_ms=999) for _ in r.extensions])})
    router = StalledPartitionRouter(channel)
    settlements = _Settlements(router, QueueStubs(router), linger_s=0.0, timeout_s=1.0)
    stalled = Message.from_proto("jobs", leased(message_id(0, 1)), settlements).ack()
    assert Message.from_proto("jobs", leased(message_id(1, 1)), settlements).ack().result(5) is None
    later = Message.from_proto("jobs", leased(message_id(0, 2)), settlements).ack()
    assert Message.from_proto("jobs", leased(message_id(1, 2)), settlements).extend(5_000).result(5) == 999
    assert not stalled.done() and not later.done()
    router.release.set()
    assert stalled.result(5) is None and later.result(5) is None
    settlements.close(1)
    assert [r.sequence for name, r in channel.requests if name == "Ack" and r.partition == 0] == [1, 2]


def test_a_partition_without_a_leader_holds_up_only_its_own_settlements_asyncio():
    """The same for AsyncQueueConsumer's settlements."""
    import asyncio

    from raftbus.client.aio.queue_consumer import AsyncSettlements

    async def scenario():
        release = asyncio.Event()
        sent = []

        class Router:
            request_timeout_s = 1.0

            async def call_partition(self, topic, partition, fn):
                if partition == 0:
                    await asyncio.wait_for(release.wait(), 10)
                sent.append(partition)
                return qpb.QueueBatchResponse()

        settlements = AsyncSettlements(Router(), linger_s=0.0)
        stalled = settlements.ack(Message.from_proto("jobs", leased(message_id(0, 1))))
        await asyncio.wait_for(settlements.ack(Message.from_proto("jobs", leased(message_id(1, 1)))), 5)
        later = settlements.ack(Message.from_proto("jobs", leased(message_id(0, 2))))
        await asyncio.wait_for(settlements.ack(Message.from_proto("jobs", leased(message_id(1, 2)))), 5)
        assert not stalled.done() and not later.done() and sent == [1, 1]
        release.set()
        await asyncio.wait_for(asyncio.gather(stalled, later), 5)
        await settlements.close(1)
        assert sent == [1, 1, 0, 0]

    asyncio.run(scenario())


def test_extend_updates_the_message_deadline():
    channel = FakeChannel({"Extend": lambda r: qpb.QueueBatchResponse(
        results=[qpb.QueueItemResult(lease_deadline_ms=999) for _ in r.extensions])})
    router = FakeRouter(channel)
    settlements = _Settlements(router, QueueStubs(router), linger_s=0.0, timeout_s=1.0)
    message = Message.from_proto("jobs", leased(message_id(0, 1)), settlements)
    assert message.extend(5_000).result(5) == 999 and message.lease_deadline_ms == 999
    settlements.close(1)


def test_queues_client_leases_packed_and_acks_packed():
    record = encode_batch([(7, b"k", b"v", ())])[0]
    rows = {seq: MESSAGE_HEADER.pack(3, seq, 1, 5, 5, 99, 0, 0, 0, 0) + record for seq in (4, 13)}  # in flight
    channel = FakeChannel({
        "Lease": lambda r: qpb.LeaseResponse(packed_messages=pack_messages(
            [(message_id(r.partition, seq), row) for seq, row in rows.items()]) if r.packed else b""),
        "Ack": ack_answers})
    queues = Queues(router=FakeRouter(channel))
    leased = queues.lease("jobs", 2, max_messages=10)
    assert [(m.message_id, m.partition, m.priority, m.value, m.lease_deadline_ms) for m in leased] == \
        [(message_id(2, 4), 2, 4, b"v", 99), (message_id(2, 13), 2, 13, b"v", 99)]
    answers = queues.ack_many(leased)
    assert answers[0] is None and isinstance(answers[1], errors.LeaseLost)
    ack = channel.requests[-1][1]
    assert unpack_leases(ack.packed_leases) == [(message_id(2, 4), 1), (message_id(2, 13), 1)] and not ack.leases


def test_queues_client_groups_deletes_by_partition_and_answers_per_id():
    def delete(request):
        return qpb.QueueBatchResponse(results=[
            qpb.QueueItemResult(error=pb.Error(code="UNKNOWN_MESSAGE", message="no")) if mid & 1 else
            qpb.QueueItemResult() for mid in request.message_ids])

    channel = FakeChannel({"Delete": delete})
    queues = Queues(router=FakeRouter(channel))
    ids = [message_id(0, 2), message_id(2, 3), message_id(0, 5)]
    answers = queues.delete("jobs", ids)
    assert answers[0] is None and isinstance(answers[1], errors.UnknownMessage) and \
        isinstance(answers[2], errors.UnknownMessage)
    assert sorted(r.partition for _, r in channel.requests) == [0, 2]


def test_queues_client_redrives_every_dead_letter_partition_until_empty():
    moved = {0: [1000, 3], 1: [0]}

    def redrive(request):
        return qpb.RedriveResponse(moved=moved[request.partition].pop(0))

    channel = FakeChannel({"Redrive": redrive})
    assert Queues(router=FakeRouter(channel, partitions=2)).redrive("jobs") == 1003
    assert [(r.topic, r.partition) for _, r in channel.requests] == [("jobs", 0), ("jobs", 0), ("jobs", 1)]


def test_stats_combine_partitions_and_groups():
    p0 = PartitionQueueStats(0, 2, 1, 0, 0, 500, None, 3, (GroupQueueStats("a", 2, 1, 0, 0, 500),), False)
    p1 = PartitionQueueStats(1, 1, 0, 4, 1, 900, 10, 6, (GroupQueueStats("a", 1, 0, 0, 0, 900),
                                                         GroupQueueStats("b", 0, 0, 4, 1, None)), False)
    stats = QueueStats.combine("jobs", [p0, p1], dead_lettered=7)
    assert (stats.ready, stats.delayed, stats.in_flight, stats.dead, stats.dead_lettered) == (3, 1, 4, 1, 7)
    assert stats.oldest_ready_age_ms == 900
    assert stats.groups == (GroupQueueStats("a", 3, 1, 0, 0, 900), GroupQueueStats("b", 0, 0, 4, 1, None))
    assert stats.to_dict()["partitions"][1]["next_delivery_ms"] == 10


def test_queues_client_redrive_names_a_stream_topic_as_the_wrong_kind():
    """Not the UNKNOWN_TOPIC of its `<topic>.dlq`: the topic is there, of the other kind."""
    from raftbus.client.errors import WrongTopicKind

    with pytest.raises(WrongTopicKind, match="topic 'stream-orders' is a stream topic, not a queue topic"):
        Queues(router=FakeRouter(None)).redrive("stream-orders")
