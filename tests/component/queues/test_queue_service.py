"""Goal: the queue service enqueues, leases (once, long-polled and streamed), settles, inspects, dead-letters and
redrives through replicated commands, refusing bad input with typed errors, over in-process replication and a
manual clock."""
import threading

import pytest

from raftbus.broker.queues.state import runs, tables
from raftbus.client import errors
from raftbus.client.queues.ids import message_id, split_message_id
from raftbus.client.records import decode_batch
from tests.component.queue_harness import QueueBroker, message
from tests.helpers import wait_until


@pytest.fixture
def broker():
    b = QueueBroker()
    b.create("jobs", partitions=2)
    return b


def values(leased) -> list[bytes]:
    return [decode_batch(m.record)[0][2] for m in leased]


def lease_refs(leased):
    return [(m.message_id, m.delivery_count) for m in leased]


def test_enqueue_lease_ack_round_trip_with_ids_that_carry_the_partition(broker):
    ids = broker.put("jobs", b"a", b"b", partition=1, priority=3)
    assert [split_message_id(mid) for mid in ids] == [(1, 1), (1, 2)]
    leased = broker.queues.lease("jobs", 1, max_messages=10, visibility_ms=5_000)
    assert values(leased) == [b"a", b"b"] and [m.state for m in leased] == ["in_flight", "in_flight"]
    assert leased[0].lease_deadline_ms == broker.clock.now_ms() + 5_000 and leased[0].priority == 3
    assert broker.queues.ack("jobs", 1, lease_refs(leased)) == [None, None]
    assert broker.queues.stats("jobs", 1).enqueued_total == 2
    with pytest.raises(errors.UnknownMessage):
        broker.queues.get("jobs", ids[0])


def test_the_dead_letter_topic_exists_and_stream_operations_are_refused(broker):
    dlq = broker.context.topic("jobs.dlq")
    assert dlq.kind == "queue" and len(dlq.partitions) == 2 and dlq.queue.dead_letter_of == "jobs"
    broker.create("log", kind="stream")
    with pytest.raises(errors.WrongTopicKind):
        broker.queues.lease("log", 0, max_messages=1)
    with pytest.raises(errors.WrongTopicKind):
        broker.put("log", b"x")
    with pytest.raises(errors.UnknownTopic):
        broker.put("nope", b"x")


@pytest.mark.parametrize("fields, error", [
    ({"group": "a..b"}, errors.InvalidArgument),
    ({"group": "x" * 256}, errors.InvalidArgument),
    ({"idempotency_key": "bad\nkey"}, errors.InvalidArgument),
    ({"deliver_at_ms": -1}, errors.InvalidArgument),
    ({"deliver_at_ms": 10**15}, errors.InvalidArgument),
    ({"origin_id": 7 << 60}, errors.InvalidArgument),
])
def test_bad_messages_are_refused_and_nothing_is_enqueued(broker, fields, error):
    with pytest.raises(error):
        broker.queues.enqueue("jobs", 0, [message(b"ok"), message(b"bad", **fields)])
    assert broker.replica("jobs").state_machine.counts() == (0, 0, 0, 0)


def test_batch_and_record_limits():
    broker = QueueBroker(record_bytes_max=100, queue_batch_messages_max=3)
    broker.create("jobs")
    with pytest.raises(errors.EmptyBatch):
        broker.queues.enqueue("jobs", 0, [])
    with pytest.raises(errors.BatchTooLarge):
        broker.put("jobs", *[b"x"] * 4)
    with pytest.raises(errors.RecordTooLarge):
        broker.put("jobs", b"x" * 100)
    with pytest.raises(errors.InvalidArgument):
        broker.queues.lease("jobs", 0, max_messages=1, visibility_ms=1)
    with pytest.raises(errors.InvalidArgument):
        broker.queues.lease("jobs", 0, max_messages=0)


def test_not_the_leader_answers_with_a_hint(broker):
    broker.admin.register_broker(2, "127.0.0.1:3", "127.0.0.1:4")
    broker.replica("jobs").group.set_leader(2)
    with pytest.raises(errors.NotLeader) as refused:
        broker.put("jobs", b"x")
    assert (refused.value.leader_id, refused.value.leader_address) == (2, "127.0.0.1:3")


def test_batched_settlements_answer_per_message(broker):
    ids = broker.put("jobs", b"a", b"b", b"c")
    leased = broker.queues.lease("jobs", 0, max_messages=3)
    other_partition = message_id(1, 1)
    answers = broker.queues.ack("jobs", 0, [(ids[0], 1), (ids[1], 7), (other_partition, 1), (-5, 1)])
    assert answers[0] is None
    assert [type(a) for a in answers[1:]] == [errors.LeaseLost, errors.UnknownMessage, errors.InvalidArgument]
    assert str(ids[1]) in answers[1].message
    deadline = broker.queues.extend("jobs", 0, [(ids[1], 1, 60_000)])
    assert deadline == [broker.clock.now_ms() + 60_000]
    assert broker.queues.nack("jobs", 0, [(ids[1], 1, 0, "retry me"), (ids[2], 1, None, "")]) == [None, None]
    assert broker.queues.get("jobs", ids[1]).last_error == "retry me"
    assert broker.queues.get("jobs", ids[2]).state == "delayed"  # the default backoff
    with pytest.raises(errors.InvalidArgument):
        broker.queues.nack("jobs", 0, [(ids[1], 2, -1, "")])
    assert len(leased) == 3


def test_long_poll_lease_wakes_on_enqueue(broker):
    got = []
    poller = threading.Thread(target=lambda: got.append(
        broker.queues.lease("jobs", 0, max_messages=5, max_wait_ms=20_000)))
    poller.start()
    wait_until(lambda: broker.replica("jobs").waiters == 1, 5, what="the lease waiting")
    broker.put("jobs", b"hello")
    poller.join(10)
    assert values(got[0]) == [b"hello"]


def test_long_poll_lease_wakes_when_a_delayed_message_is_due(broker):
    broker.put("jobs", b"later", deliver_at_ms=broker.clock.now_ms() + 60_000)
    got = []
    poller = threading.Thread(target=lambda: got.append(
        broker.queues.lease("jobs", 0, max_messages=5, max_wait_ms=20_000)))
    poller.start()
    wait_until(lambda: broker.replica("jobs").waiters == 1, 5, what="the lease waiting")
    broker.clock.advance(60_000)
    broker.replica("jobs").notify_appended()  # any apply (here: a stand-in) makes the waiter look at the clock
    poller.join(10)
    assert values(got[0]) == [b"later"]


def test_long_poll_lease_returns_empty_after_its_wait():
    broker = QueueBroker()
    broker.create("jobs")
    assert broker.queues.lease("jobs", 0, max_messages=1, max_wait_ms=50) == []


def test_lease_stream_keeps_at_most_max_in_flight_unsettled(broker):
    broker.put("jobs", *[b"m%d" % i for i in range(5)])
    active = threading.Event()
    active.set()
    stream = broker.queues.lease_stream("jobs", 0, max_messages=10, max_in_flight=2, is_active=active.is_set)
    first = next(stream)
    assert values(first) == [b"m0", b"m1"]
    got = []
    reader = threading.Thread(target=lambda: got.append(next(stream)))
    reader.start()
    wait_until(lambda: broker.replica("jobs").waiters == 1, 5, what="the stream waiting for room")
    assert got == []
    broker.queues.ack("jobs", 0, lease_refs(first[:1]))
    reader.join(10)
    assert values(got[0]) == [b"m2"]
    broker.queues.nack("jobs", 0, [(first[1].message_id, 1, 0, "")])
    second = next(stream)
    assert values(second) == [b"m1"] and second[0].delivery_count == 2
    active.clear()
    broker.replica("jobs").notify_appended()
    assert list(stream) == []


def test_lease_stream_ends_with_not_leader_when_leadership_moves(broker):
    broker.put("jobs", b"a")
    stream = broker.queues.lease_stream("jobs", 0, max_messages=1, max_in_flight=1)
    next(stream)
    broker.replica("jobs").group.set_leader(None)
    broker.replica("jobs").notify_appended()
    with pytest.raises(errors.LeaderNotAvailable):
        next(stream)


def test_tick_expires_leases_when_no_consumer_writes(broker):
    broker.put("jobs", b"a")
    broker.queues.lease("jobs", 0, max_messages=1, visibility_ms=1_000)
    replica = broker.replica("jobs")
    topic = broker.context.topic("jobs")
    broker.queues.tick_if_due(replica, topic)
    assert replica.state_machine.counts() == (0, 0, 1, 0)
    broker.clock.advance(1_000)
    broker.queues.tick_if_due(replica, topic)
    assert replica.state_machine.counts() == (0, 1, 0, 0)  # back, after its backoff


def test_get_delete_and_change_priority_by_id(broker):
    low, high = broker.put("jobs", b"low", b"high", priority=5)
    changed = broker.queues.change_priority("jobs", high, priority=1)
    assert changed.priority == 1 and changed.state == "ready"
    later = broker.queues.change_priority("jobs", low, deliver_at_ms=broker.clock.now_ms() + 500)
    assert later.state == "delayed"
    assert [m.message_id for m in broker.queues.peek("jobs", 0, state="delayed")] == [low]
    assert broker.queues.delete("jobs", 0, [low]) == [None]
    with pytest.raises(errors.UnknownMessage):
        broker.queues.get("jobs", low)
    leased = broker.queues.lease("jobs", 0, max_messages=1)
    with pytest.raises(errors.MessageNotWaiting):
        broker.queues.change_priority("jobs", high, deliver_at_ms=0)
    assert broker.queues.change_priority("jobs", high, priority=9).state == "in_flight"
    with pytest.raises(errors.InvalidArgument):
        broker.queues.change_priority("jobs", high)
    assert len(leased) == 1


def test_delete_answers_per_message(broker):
    mid, = broker.put("jobs", b"x")
    answers = broker.queues.delete("jobs", 0, [mid, mid])
    assert answers[0] is None and isinstance(answers[1], errors.UnknownMessage)


def test_stats_per_partition_and_group_with_oldest_ready_age(broker):
    broker.put("jobs", b"a", group="acme.web")
    broker.clock.advance(2_000)
    broker.put("jobs", b"b", group="beta")
    broker.put("jobs", b"c", group="beta", deliver_at_ms=broker.clock.now_ms() + 10)
    broker.clock.advance(500)
    stats = broker.queues.stats("jobs", 0)
    assert (stats.ready, stats.delayed, stats.in_flight, stats.dead) == (2, 1, 0, 0)
    assert stats.oldest_ready_age_ms == 2_500 and stats.next_delivery_ms == broker.clock.now_ms() - 490
    groups = {g.group: g for g in stats.groups}
    assert (groups["acme.web"].ready, groups["acme.web"].oldest_ready_age_ms) == (1, 2_500)
    assert (groups["beta"].ready, groups["beta"].delayed, groups["beta"].oldest_ready_age_ms) == (1, 1, 500)


def test_dead_letters_move_with_their_history_and_redrive_back():
    broker = QueueBroker()
    broker.create("jobs", partitions=2, max_deliveries=2, backoff_base_ms=0, backoff_max_ms=0)
    mid, = broker.put("jobs", b"poison", partition=1, priority=4, group="acme")
    for delivery in (1, 2):
        (leased,) = broker.queues.lease("jobs", 1, max_messages=1)
        broker.queues.nack("jobs", 1, [(mid, delivery, None, f"failed {delivery}")])
    assert broker.replica("jobs", 1).state_machine.counts() == (0, 0, 0, 1)
    assert broker.dead_letters.move_once() == 1
    assert broker.replica("jobs", 1).state_machine.counts() == (0, 0, 0, 0)
    (dead,) = broker.queues.peek("jobs.dlq", 1)
    assert (dead.origin_id, dead.delivery_count, dead.last_error, dead.priority, dead.group) == \
           (mid, 2, "failed 2", 4, "acme")
    assert values([dead]) == [b"poison"]

    moved = broker.dead_letters.redrive("jobs", 1, 100)
    assert moved == 1 and broker.replica("jobs.dlq", 1).state_machine.counts() == (0, 0, 0, 0)
    (back,) = broker.queues.peek("jobs", 1)
    assert (back.delivery_count, back.origin_id, back.last_error) == (0, dead.message_id, "failed 2")
    assert broker.dead_letters.redrive("jobs", 1, 100) == 0


def test_a_repeated_dead_letter_move_is_not_duplicated():
    broker = QueueBroker()
    broker.create("jobs", max_deliveries=1)
    mid, = broker.put("jobs", b"x")
    broker.queues.lease("jobs", 0, max_messages=1)
    broker.queues.nack("jobs", 0, [(mid, 1, None, "")])
    # A mover that crashed after its enqueue into the dead-letter topic committed, before the removal:
    sm = broker.replica("jobs").state_machine
    (seq, dead), = sm.peek(4, 10)
    broker.forward("jobs.dlq", 0, [message(b"x", origin_id=mid, delivery_count=1)])
    assert broker.dead_letters.move_once() == 1
    assert broker.replica("jobs.dlq").state_machine.counts() == (1, 0, 0, 0)
    assert seq == split_message_id(mid)[1] and dead.state == 4


def test_redrive_needs_a_source_with_a_dead_letter_topic(broker):
    with pytest.raises(errors.WrongTopicKind):
        broker.dead_letters.redrive("jobs.dlq", 0, 10)
    with pytest.raises(errors.InvalidArgument):
        broker.dead_letters.redrive("jobs", 0, 0)


def test_queue_options_are_validated_on_create():
    broker = QueueBroker()
    with pytest.raises(errors.InvalidArgument):
        broker.create("a", max_deliveries=-1)
    with pytest.raises(errors.InvalidArgument):
        broker.create("b", idempotency_window_ms=1)
    with pytest.raises(errors.InvalidArgument):
        broker.create("c", kind="stream", max_deliveries=3)
    with pytest.raises(errors.InvalidArgument):
        broker.create("d", ordering="lifo")
    topic = broker.create("e", ordering="fair", max_in_flight_per_group=2)
    assert topic.queue.max_in_flight_per_group == 2 and topic.queue.max_deliveries == 5


def test_idempotency_keys_through_the_service(broker):
    first, = broker.put("jobs", b"a", idempotency_key="order-7")
    _, results = broker.queues.enqueue("jobs", 0, [message(b"a", idempotency_key="order-7")])
    assert results == [(first, True)]
    broker.clock.advance(24 * 3600 * 1000)
    _, results = broker.queues.enqueue("jobs", 0, [message(b"a", idempotency_key="order-7")])
    assert results[0][1] is False and results[0][0] != first


def test_waiting_calls_per_broker_are_bounded():
    broker = QueueBroker(queue_waiting_calls_max=1)
    broker.create("jobs")
    broker.put("jobs", b"a")
    first = broker.queues.lease_stream("jobs", 0, max_messages=1)
    next(first)
    with pytest.raises(errors.Overloaded):
        next(broker.queues.lease_stream("jobs", 0, max_messages=1))
    with pytest.raises(errors.Overloaded):
        broker.queues.lease("jobs", 0, max_messages=1, max_wait_ms=10)
    assert broker.queues.lease("jobs", 0, max_messages=1) == []  # without waiting: no bound
    first.close()
    assert broker.queues.lease("jobs", 0, max_messages=1, max_wait_ms=10) == []


@pytest.mark.parametrize("enabled, ordering, stored_as_runs", [
    (True, "priority", True), (False, "priority", False), (True, "fair", False)])
def test_queue_runs_enabled_decides_how_a_leader_stores_a_batch(enabled, ordering, stored_as_runs):
    """A leader stamps ENQUEUE_RUNS when queue_runs_enabled; only priority-ordered partitions store runs, and a
    batch reads back the same either way."""
    broker = QueueBroker(queue_runs_enabled=enabled)
    broker.create("work", ordering=ordering)
    ids = broker.put("work", *[b"m%d" % i for i in range(6)], partition=0)
    with broker.replica("work").store.read() as txn:
        assert (next(txn.items(runs.RUNS), None) is not None) == stored_as_runs
        assert (next(txn.items(tables.MESSAGES), None) is None) == stored_as_runs
    leased = broker.queues.lease("work", 0, max_messages=10, visibility_ms=5_000)
    assert values(leased) == [b"m%d" % i for i in range(6)] and [m.message_id for m in leased] == ids
    assert broker.queues.ack("work", 0, lease_refs(leased)) == [None] * 6
