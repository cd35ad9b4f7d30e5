"""Component tests: produce, fetch, offsets and retention through the services, over in-process replication."""
from __future__ import annotations

import threading

import pytest

from raftbus.client import errors
from raftbus.client.records import decode_fetched, encode_batch
from tests.component.harness import PRODUCER, ServiceBroker


@pytest.fixture
def broker():
    b = ServiceBroker()
    b.create_topic("orders", partitions=2, replication_factor=3)
    return b


def values_read(broker, topic="orders", partition=0, offset=0):
    result = broker.log.fetch(topic, partition, offset, max_bytes=1 << 20, max_wait_ms=0)
    return [r.value for r in decode_fetched(topic, partition, result.batches, offset)]


def test_produced_batches_get_gapless_offsets_and_read_back_in_order(broker):
    """Goal: batches take consecutive offsets per partition and a fetch from any offset returns them in order."""
    first = broker.produce("orders", 0, [b"a", b"b", b"c"], sequence=0)
    second = broker.produce("orders", 0, [b"d"], sequence=3)
    other = broker.produce("orders", 1, [b"x"], sequence=0)
    assert (first.base_offset, second.base_offset, other.base_offset) == (0, 3, 0)
    assert values_read(broker) == [b"a", b"b", b"c", b"d"]
    assert values_read(broker, offset=2) == [b"c", b"d"]
    assert broker.log.list_offsets("orders", 0, -2) == (0, 0, 4)
    assert broker.log.list_offsets("orders", 0, -1) == (4, 0, 4)


def test_a_retried_batch_returns_its_original_offsets_and_a_gap_is_refused(broker):
    """Goal: the idempotent producer's retry is not appended twice, and a skipped sequence is a typed error."""
    first = broker.produce("orders", 0, [b"a", b"b"], sequence=0)
    retry = broker.produce("orders", 0, [b"a", b"b"], sequence=0)
    assert (retry.base_offset, retry.duplicate) == (first.base_offset, True)
    with pytest.raises(errors.OutOfOrderSequence):
        broker.produce("orders", 0, [b"c"], sequence=5)
    assert values_read(broker) == [b"a", b"b"]
    assert broker.produce("orders", 0, [b"c"], sequence=2).base_offset == 2


@pytest.mark.parametrize("call, error", [
    (lambda b: b.log.produce("orders", 0, producer_id=PRODUCER, base_sequence=0, record_count=0,
                             max_timestamp_ms=0, records=b""), errors.EmptyBatch),
    (lambda b: b.log.produce("orders", 0, producer_id=PRODUCER, base_sequence=0, record_count=1,
                             max_timestamp_ms=0, records=bytes(b.settings.log.batch_bytes_max + 1)), errors.BatchTooLarge),
    (lambda b: b.log.produce("orders", 0, producer_id=b"short", base_sequence=0, record_count=1,
                             max_timestamp_ms=0, records=b"x"), errors.InvalidArgument),
    (lambda b: b.produce("nope", 0, [b"v"]), errors.UnknownTopic),
    (lambda b: b.produce("orders", 7, [b"v"]), errors.UnknownPartition),
    (lambda b: b.log.fetch("orders", 0, 5, max_bytes=100, max_wait_ms=0), errors.OffsetOutOfRange),
    (lambda b: b.log.list_offsets("orders", 0, -7), errors.InvalidArgument),
    (lambda b: b.log.produce("orders", 0, producer_id=PRODUCER, base_sequence=1, record_count=1,
                             max_timestamp_ms=0, records=b"not records at all"), errors.CorruptBatch),
    (lambda b: b.log.produce("orders", 0, producer_id=PRODUCER, base_sequence=1, record_count=3,
                             max_timestamp_ms=1, records=encode_batch([(1, None, b"v", ())] * 2)[0]),
     errors.CorruptBatch),
])
def test_bad_requests_get_typed_errors_and_change_nothing(broker, call, error):
    """Goal: every malformed or misdirected request is refused with its typed error and the log is untouched."""
    broker.produce("orders", 0, [b"kept"])
    with pytest.raises(error):
        call(broker)
    assert values_read(broker) == [b"kept"]
    assert broker.log.list_offsets("orders", 0, -1)[0] == 1


def test_a_stream_call_on_a_queue_topic_is_the_wrong_kind(broker):
    """Goal: produce and fetch name the topic kind they serve; a queue topic answers WRONG_TOPIC_KIND."""
    broker.create_topic("jobs", partitions=1, kind="queue")
    with pytest.raises(errors.WrongTopicKind):
        broker.produce("jobs", 0, [b"v"])
    with pytest.raises(errors.WrongTopicKind):
        broker.log.fetch("jobs", 0, 0, max_bytes=100, max_wait_ms=0)


def test_a_follower_answers_not_leader_with_the_leaders_address(broker):
    """Goal: a broker that does not lead a partition names the leader so the client can go there at once."""
    broker.replica("orders", 1).group.set_leader(2)
    with pytest.raises(errors.NotLeader) as caught:
        broker.produce("orders", 1, [b"v"])
    assert (caught.value.leader_id, caught.value.leader_address) == (2, "127.0.0.1:9002")
    broker.context.partitions[next(g for g, r in broker.context.partitions.items() if r.partition == 1)] \
        .group.set_leader(None)
    with pytest.raises(errors.LeaderNotAvailable):
        broker.log.fetch("orders", 1, 0, max_bytes=100, max_wait_ms=0)


def test_retention_by_time_trims_whole_old_batches_from_the_leaders_clock(broker):
    """Goal: batches older than retention_ms (by the leader's stamped time) go; newer ones and offsets stay."""
    broker.create_topic("events", partitions=1, retention_ms=60_000)
    broker.produce("events", 0, [b"old-1", b"old-2"])
    broker.clock.advance(50_000)
    broker.produce("events", 0, [b"new"], sequence=2)
    replica = broker.replica("events", 0)
    broker.log.trim_if_due(replica, 60_000, -1)
    assert broker.log.list_offsets("events", 0, -2)[0] == 0  # nothing is old enough yet
    broker.clock.advance(20_000)
    broker.log.trim_if_due(replica, 60_000, -1)
    assert broker.log.list_offsets("events", 0, -2) == (2, 2, 3)
    assert values_read(broker, "events", 0, 2) == [b"new"]
    with pytest.raises(errors.OffsetOutOfRange):
        broker.log.fetch("events", 0, 0, max_bytes=100, max_wait_ms=0)


def test_retention_by_size_keeps_the_newest_batches_under_the_limit(broker):
    """Goal: a partition over retention_bytes drops its oldest batches until it fits."""
    broker.create_topic("sized", partitions=1, retention_bytes=300)
    for i in range(5):
        broker.produce("sized", 0, [bytes(80)], sequence=i)
    replica = broker.replica("sized", 0)
    assert replica.state_machine.size_bytes() > 300
    broker.log.trim_if_due(replica, -1, 300)
    log_start, high_watermark = replica.state_machine.offsets()
    assert replica.state_machine.size_bytes() <= 300
    assert high_watermark == 5 and 0 < log_start < 5


def test_seeking_by_time_finds_the_first_batch_at_or_after_it(broker):
    """Goal: list_offsets by timestamp uses the time index to find the first offset at or after that time."""
    for i, ts in enumerate((1_000, 2_000, 3_000)):
        broker.produce("orders", 0, [f"r{i}".encode()], sequence=i, timestamp_ms=ts)
    assert broker.log.list_offsets("orders", 0, 1_500)[0] == 1
    assert broker.log.list_offsets("orders", 0, 3_000)[0] == 2
    assert broker.log.list_offsets("orders", 0, 9_000)[0] == 3


def test_a_long_poll_fetch_returns_as_soon_as_a_batch_is_committed(broker):
    """Goal: a fetch waiting at the end of the log wakes up on the next append instead of waiting it out."""
    results = []
    waiter = threading.Thread(target=lambda: results.append(
        broker.log.fetch("orders", 0, 0, max_bytes=1 << 20, max_wait_ms=20_000)))
    waiter.start()
    replica = broker.replica("orders", 0)
    from tests.helpers import wait_until
    wait_until(lambda: replica.waiters == 1, 5, what="the fetch to wait")
    broker.produce("orders", 0, [b"late"])
    waiter.join(5)
    assert not waiter.is_alive()
    assert [r.value for r in decode_fetched("orders", 0, results[0].batches)] == [b"late"]


def test_fetch_waiters_are_bounded(broker):
    """Goal: more long-polls on one partition than fetch_waiters_max are refused with OVERLOADED."""
    small = ServiceBroker(fetch_waiters_max=1)
    small.create_topic("orders", partitions=1)
    replica = small.replica("orders", 0)
    waiter = threading.Thread(target=small.log.fetch, args=("orders", 0, 0),
                              kwargs={"max_bytes": 100, "max_wait_ms": 10_000})
    waiter.start()
    from tests.helpers import wait_until
    wait_until(lambda: replica.waiters == 1, 5, what="the first fetch to wait")
    with pytest.raises(errors.Overloaded):
        small.log.fetch("orders", 0, 0, max_bytes=100, max_wait_ms=10_000)
    small.produce("orders", 0, [b"wake"])
    waiter.join(5)
    assert not waiter.is_alive()


def test_a_records_blob_is_stored_and_returned_byte_for_byte(broker):
    """Goal: the broker treats the producer's batch as opaque bytes: what is fetched is exactly what was sent."""
    blob, count, max_ts = encode_batch([(5, b"k", b"v", (("h", b"1"),)), (6, None, None, ())])
    broker.log.produce("orders", 0, producer_id=b"", base_sequence=0, record_count=count, max_timestamp_ms=max_ts,
                       records=blob)
    fetched = broker.log.fetch("orders", 0, 0, max_bytes=1 << 20, max_wait_ms=0).batches
    assert fetched.endswith(blob)
