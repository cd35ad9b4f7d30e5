"""Goal: packed queue batches (proto/queues.proto) round-trip, match the stored message layout, and refuse
malformed bytes with InvalidArgument."""
import pytest

from raftbus.broker.queues.state.records import IN_FLIGHT, StoredMessage, encode_message
from raftbus.client import errors
from raftbus.client.queues.ids import message_id
from raftbus.client.queues.messages import Message, leased_messages
from raftbus.client.queues.codec import (
    MessageFields,
    delivery_count_of,
    iter_messages,
    lease_heads,
    lease_refs_of,
    message_fields,
    pack_leases,
    pack_messages,
    priority_of,
    unpack_leases,
)
from raftbus.client.records import encode_batch
from raftbus.client.wire import queues_pb2 as qpb

RECORD = encode_batch([(7, b"k", b"value", (("h", b"1"),))])[0]


def stored(priority=3, count=2, group=b"acme.web", key=b"order-1", error=b"db down", record=RECORD) -> bytes:
    return encode_message(StoredMessage(IN_FLIGHT, priority, count, 100, 200, 300, 9, group, key, error, record))


def test_a_stored_message_is_a_packed_message():
    packed = pack_messages([(message_id(2, 5), stored()), (message_id(2, 6), stored(priority=-4, count=1,
                                                                                     group=b"", key=b"", error=b""))])
    (first_id, first), (second_id, second) = list(iter_messages(packed))
    assert (first_id, second_id) == (message_id(2, 5), message_id(2, 6))
    assert message_fields(first) == MessageFields(IN_FLIGHT, 3, 2, 100, 200, 300, 9, b"acme.web", b"order-1",
                                                  b"db down", RECORD)
    assert message_fields(second)[7:10] == (b"", b"", b"")
    assert (priority_of(second), delivery_count_of(second)) == (-4, 1)
    assert unpack_leases(lease_refs_of(packed)) == [(message_id(2, 5), 2), (message_id(2, 6), 1)]
    assert lease_heads(packed) == [(message_id(2, 5), 3, 2), (message_id(2, 6), -4, 1)]


def test_packed_leases_round_trip():
    leases = [(message_id(0, 1), 1), (message_id(7, 2**40 - 1), 2**32 - 1)]
    packed = pack_leases(leases)
    assert len(packed) == 24 and unpack_leases(packed) == leases
    assert pack_leases([]) == b"" and unpack_leases(b"") == []


@pytest.mark.parametrize("packed", [
    b"\x00" * 5,                                                  # inside an entry header
    pack_messages([(1, stored())])[:-1],                          # message cut short
    pack_messages([(1, b"\x03" * 10)]),                           # shorter than a message header
])
def test_malformed_packed_messages_are_refused(packed):
    with pytest.raises(errors.InvalidArgument):
        list(iter_messages(packed))
    with pytest.raises(errors.InvalidArgument):
        lease_heads(packed)


def test_field_lengths_past_the_end_are_refused():
    message = stored()[:60]
    with pytest.raises(errors.InvalidArgument):
        message_fields(message)


def test_packed_leases_must_be_whole():
    with pytest.raises(errors.InvalidArgument):
        unpack_leases(b"\x00" * 13)


def test_a_packed_lease_answer_gives_the_same_messages_as_the_proto_one():
    mid = message_id(1, 4)
    packed = qpb.LeaseResponse(packed_messages=pack_messages([(mid, stored())]))
    proto = qpb.LeaseResponse(messages=[qpb.QueueMessage(
        message_id=mid, partition=1, state="in_flight", priority=3, group="acme.web", delivery_count=2,
        enqueued_ms=100, available_ms=200, lease_deadline_ms=300, origin_id=9, idempotency_key="order-1",
        last_error="db down", record=RECORD)])
    from_packed, = leased_messages("jobs", 1, packed)
    from_proto, = leased_messages("jobs", 1, proto)
    assert from_packed == from_proto
    assert isinstance(from_packed, Message) and (from_packed.key, from_packed.value) == (b"k", b"value")
