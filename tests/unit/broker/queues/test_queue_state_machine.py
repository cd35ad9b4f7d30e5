"""Goal: the queue state machine delivers in the right order, leases, retries with deterministic backoff,
dead-letters, deduplicates and reschedules exactly as its commands say, on both stores, and refusals change
nothing."""
import random

import pytest

from raftbus.broker.clock import Stamp
from raftbus.broker.queues import commands as queue_commands
from raftbus.broker.queues.state.machine import EnqueueResult, Enqueued, QueueStateMachine
from raftbus.broker.queues.state.backoff import retry_delay_ms
from raftbus.broker.queues.state import tables as q
from raftbus.broker.queues.state.records import DEAD, DELAYED, IN_FLIGHT, READY, seq_of
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors
from tests.unit.broker.queues.harness import POLICY, QueueHarness, drain, item


@pytest.fixture(params=["memory", "lmdb"])
def store(request, tmp_path):
    if request.param == "memory":
        yield MemoryStore(QueueStateMachine.TABLES)
        return
    lmdb_store = LmdbStore(str(tmp_path / "store"), QueueStateMachine.TABLES, 1 << 20)
    yield lmdb_store
    lmdb_store.close()


@pytest.fixture
def queue(store):
    return QueueHarness(store)


def memory_queue(ordering="priority", **policy) -> QueueHarness:
    return QueueHarness(MemoryStore(QueueStateMachine.TABLES), ordering, POLICY._replace(**policy))


# ---------------------------------------------------------------------- ordering
@pytest.mark.parametrize("enqueued, delivered", [
    # (value, priority) in arrival order -> delivery order
    ([(b"a", 5), (b"b", 1), (b"c", 3)], [b"b", b"c", b"a"]),
    ([(b"a", 1), (b"b", 1), (b"c", 1)], [b"a", b"b", b"c"]),                       # ties by arrival
    ([(b"a", 0), (b"b", -7), (b"c", 2**31 - 1), (b"d", -(2**31))], [b"d", b"b", b"a", b"c"]),
    ([(b"a", 2), (b"b", 1), (b"c", 2), (b"d", 1)], [b"b", b"d", b"a", b"c"]),
])
@pytest.mark.parametrize("batch", [1, 3])
def test_priority_ordering_lower_first_ties_by_arrival(queue, enqueued, delivered, batch):
    queue.enqueue(*(item(v, priority=p) for v, p in enqueued))
    assert drain(queue, batch) == delivered
    queue.check_invariants()


def test_delayed_message_waits_for_its_time(queue):
    queue.put(b"later", deliver_at_ms=queue.now_ms + 500)
    queue.put(b"now", priority=9)
    assert queue.sm.counts() == (1, 1, 0, 0) and queue.sm.next_due_ms() == queue.now_ms + 500
    assert queue.lease_values() == [b"now"]
    queue.advance(499)
    assert queue.lease_values() == []
    queue.advance(1)
    assert queue.lease_values() == [b"later"]
    queue.check_invariants()


def test_a_past_deliver_at_is_ready_at_once(queue):
    queue.put(b"x", deliver_at_ms=queue.now_ms - 1)
    assert queue.sm.counts() == (1, 0, 0, 0)


# ---------------------------------------------------------------------- leases
def test_lease_returns_messages_with_delivery_count_and_deadline(queue):
    seq, = queue.put(b"x")
    (leased,) = queue.lease(visibility_ms=700)
    assert (leased.seq, leased.message.delivery_count, leased.message.deadline_ms) == (seq, 1, queue.now_ms + 700)
    assert leased.message.state == IN_FLIGHT and queue.sm.counts() == (0, 0, 1, 0)
    assert queue.lease_values() == []


def test_lease_is_bounded_by_count_and_bytes(queue):
    queue.put(b"a" * 10, b"b" * 10, b"c" * 10, b"d" * 10)
    assert len(queue.lease(max_messages=2)) == 2
    assert [m.message.record for m in queue.lease(max_bytes=15)] == [b"c" * 10]
    assert [m.message.record for m in queue.lease(max_bytes=1)] == [b"d" * 10]  # always at least one


def test_expired_lease_returns_the_message_and_counts_the_delivery(queue):
    seq, = queue.put(b"x")
    queue.lease(visibility_ms=100)
    queue.advance(99)
    assert queue.lease() == []
    queue.advance(1)
    (again,) = queue.lease()
    assert again.seq == seq and again.message.delivery_count == 2 and again.message.last_error == b"lease expired"
    queue.check_invariants()


def test_a_new_leaders_grace_keeps_only_the_leases_that_ran_out_before_its_term(queue):
    """A new leader's grace (broker/clock.py, Stamp): its commands keep the leases whose deadline fell after the
    time the partition had applied and at or before the term's anchor (they ran out while it had no leader): those
    can still be extended and acked. Leases that ran out before that, and leases past their deadline after the
    anchor (granted in the term), expire as usual; the kept ones expire once the grace is over."""
    a, b, c = queue.put(b"a", b"b", b"c")
    assert [m.seq for m in queue.lease(max_messages=1, visibility_ms=100)] == [a]        # deadline 1_100
    assert [m.seq for m in queue.lease(max_messages=2, visibility_ms=1_000)] == [b, c]   # deadline 2_000
    assert queue.sm.next_expiry_ms() == 1_100 and queue.sm.next_delivery_ms() is None
    grace = Stamp(now_ms=5_000, held_ms=1_500, anchor_ms=4_000, grace_ends_ms=7_000)
    assert grace.kept_leases == (1_500, 4_000)
    assert [grace.lease_expires_ms(t) for t in (1_100, 2_000, 5_300)] == [1_100, 7_000, 5_300]
    (again,) = queue.apply(queue_commands.encode_lease(grace, queue.policy, 10, 1 << 20, 300))
    assert again.seq == a and again.message.delivery_count == 2  # ran out before the partition's applied time
    assert queue.sm.next_expiry_after(4_000) == 5_300
    later = grace._replace(now_ms=5_400)
    assert queue.apply(queue_commands.encode_extend(later, queue.policy, [(b, 1, 1_000)])) == [6_400]
    assert queue.apply(queue_commands.encode_ack(later, queue.policy, [(c, 1)])) == [None]
    assert queue.sm.counts() == (1, 0, 1, 0)  # a's lease of this term ran out at 5_300; b is leased
    queue.now_ms = 6_399  # the grace is over (plain commands keep no leases)
    assert [(m.seq, m.message.delivery_count) for m in queue.lease(visibility_ms=60_000)] == [(a, 3)]
    queue.now_ms = 6_400
    assert [(m.seq, m.message.delivery_count) for m in queue.lease(visibility_ms=60_000)] == [(b, 2)]
    queue.check_invariants()


def test_expiry_returns_only_the_messages_still_leased_under_that_deadline(queue):
    """One lease's in-flight entry outlives its acks and extensions: when its deadline comes, the acked messages are
    gone, the extended one stays leased, and only the others return to ready with their delivery counted."""
    seqs = queue.put(b"a", b"b", b"c", b"d", b"e", b"f")
    leased = queue.lease(visibility_ms=100)
    assert [m.seq for m in leased] == seqs
    assert queue.ack((seqs[0], 1), (seqs[3], 1), (seqs[5], 1)) == [None] * 3
    queue.extend(seqs[1], 1, 500)
    queue.advance(100)
    queue.tick()
    assert queue.sm.counts() == (2, 0, 1, 0)
    returned = queue.lease(visibility_ms=1_000)
    assert sorted(m.seq for m in returned) == [seqs[2], seqs[4]]
    assert {m.message.delivery_count for m in returned} == {2}
    assert {m.message.last_error for m in returned} == {b"lease expired"}
    assert queue.ack((seqs[1], 1)) == [None]
    queue.check_invariants()


def test_ack_removes_and_a_second_ack_is_refused(queue):
    seq, = queue.put(b"x")
    queue.lease()
    assert queue.ack((seq, 1)) == [None]
    assert queue.sm.counts() == (0, 0, 0, 0) and queue.sm.get(seq) is None
    (second,) = queue.ack((seq, 1))
    assert isinstance(second, errors.UnknownMessage)


def test_stale_lease_cannot_ack_after_the_message_was_leased_again(queue):
    seq, = queue.put(b"x")
    queue.lease(visibility_ms=100)
    queue.advance(100)
    (again,) = queue.lease(visibility_ms=100)
    before = queue.dump()
    (late,) = queue.ack((seq, 1))
    assert isinstance(late, errors.LeaseLost) and queue.dump() == before
    assert queue.ack((seq, again.message.delivery_count)) == [None]


def test_ack_after_expiry_but_before_a_new_lease_is_refused(queue):
    seq, = queue.put(b"x")
    queue.lease(visibility_ms=100)
    queue.advance(150)
    (late,) = queue.ack((seq, 1))
    assert isinstance(late, errors.LeaseLost) and queue.sm.counts() == (1, 0, 0, 0)


def test_batched_acks_answer_per_message(queue):
    seqs = queue.put(b"a", b"b", b"c")
    queue.lease()
    results = queue.ack((seqs[0], 1), (seqs[1], 9), (seqs[2], 1), (999, 1))
    assert [type(r).__name__ if r else None for r in results] == [None, "LeaseLost", None, "UnknownMessage"]
    assert queue.sm.counts() == (0, 0, 1, 0)


@pytest.mark.parametrize("refused", [(2, 9), (999, 1)], ids=["lease-lost", "unknown"])
def test_an_ack_batch_with_a_refusal_ends_as_acking_one_by_one(store, tmp_path, refused):
    """The batch path takes rows out before it checks them; a refusal puts them back, so the end state is that
    of single acks (rows, locators, indexes, group counters)."""
    def leased(harness):
        harness.enqueue(*(item(b"m%d" % i, priority=i % 3, group=b"g%d" % (i % 2)) for i in range(6)))
        harness.lease()
        return harness
    batch = [(1, 1), (4, 1), refused, (6, 1)]
    batched = leased(QueueHarness(store))
    one_by_one = leased(QueueHarness(MemoryStore(QueueStateMachine.TABLES)))
    answers = batched.ack(*batch)
    assert [type(a).__name__ if a else None for a in answers] == [
        None, None, "LeaseLost" if refused[0] == 2 else "UnknownMessage", None]
    assert [one_by_one.ack(lease)[0] is None for lease in batch] == [a is None for a in answers]
    assert batched.dump() == one_by_one.dump() and batched.sm.counts() == one_by_one.sm.counts() == (0, 0, 3, 0)
    batched.check_invariants()


def test_a_lease_named_twice_in_one_ack_batch_is_acked_once(queue):
    seqs = queue.put(b"a", b"b")
    queue.lease()
    results = queue.ack((seqs[0], 1), (seqs[1], 1), (seqs[0], 1))
    assert [type(r).__name__ if r else None for r in results] == [None, None, "UnknownMessage"]
    assert queue.sm.counts() == (0, 0, 0, 0)
    queue.check_invariants()


def test_messages_are_stored_in_delivery_order_and_found_by_seq(queue):
    late, early = queue.put(b"late", priority=9)[0], queue.put(b"early", priority=-3)[0]
    with queue.store.read() as txn:
        stored = [seq_of(key) for key, _ in txn.items(q.MESSAGES)]
    assert stored == [early, late]
    queue.change(late, priority=-5)
    with queue.store.read() as txn:
        assert [seq_of(key) for key, _ in txn.items(q.MESSAGES)] == [late, early]
    assert queue.sm.get(late).priority == -5 and queue.sm.get(late).record == b"late"
    queue.check_invariants()


def test_extend_moves_the_deadline_only_for_the_current_lease(queue):
    seq, = queue.put(b"x")
    queue.lease(visibility_ms=100)
    queue.advance(90)
    assert queue.extend(seq, 1, 500) == [queue.now_ms + 500]
    queue.advance(400)
    assert queue.lease() == []
    assert isinstance(queue.extend(seq, 2, 500)[0], errors.LeaseLost)
    queue.advance(100)
    assert queue.lease_values() == [b"x"]


def test_nack_with_a_delay_returns_the_message_after_it(queue):
    seq, = queue.put(b"x")
    queue.lease()
    assert queue.nack(seq, 1, delay_ms=300, reason=b"db down") == [None]
    assert queue.sm.counts() == (0, 1, 0, 0)
    queue.advance(299)
    assert queue.lease() == []
    queue.advance(1)
    (again,) = queue.lease()
    assert again.message.delivery_count == 2 and again.message.last_error == b"db down"


def test_nack_with_zero_delay_is_ready_at_once(queue):
    seq, = queue.put(b"x")
    queue.lease()
    queue.nack(seq, 1, delay_ms=0)
    assert queue.sm.counts() == (1, 0, 0, 0)


# ---------------------------------------------------------------------- backoff
@pytest.mark.parametrize("delivery_count, base_ms, max_ms, low, high", [
    (1, 1000, 60_000, 500, 1000),
    (2, 1000, 60_000, 1000, 2000),
    (3, 1000, 60_000, 2000, 4000),
    (10, 1000, 60_000, 30_000, 60_000),     # capped
    (200, 1000, 60_000, 30_000, 60_000),    # no overflow
    (1, 0, 0, 0, 0),                        # no backoff
])
def test_backoff_is_exponential_with_bounded_jitter(delivery_count, base_ms, max_ms, low, high):
    delays = [retry_delay_ms(seq, delivery_count, base_ms, max_ms) for seq in range(1, 200)]
    assert all(low <= d <= high for d in delays)
    if high > low:
        assert len(set(delays)) > 50, "jitter spreads retries"


def test_backoff_is_deterministic():
    assert [retry_delay_ms(s, 3, 1000, 60_000) for s in range(50)] == \
           [retry_delay_ms(s, 3, 1000, 60_000) for s in range(50)]


@pytest.mark.parametrize("how", ["nack", "expiry"])
def test_state_machine_applies_the_backoff_on_nack_and_expiry(how):
    queue = memory_queue(backoff_base_ms=1000, backoff_max_ms=60_000)
    seq, = queue.put(b"x")
    for delivery in (1, 2, 3):
        queue.lease(visibility_ms=100)
        if how == "nack":
            queue.nack(seq, delivery)
            failed_at = queue.now_ms
        else:
            failed_at = queue.now_ms + 100
            queue.advance(100)
            queue.tick()
        expected = failed_at + retry_delay_ms(seq, delivery, 1000, 60_000)
        message = queue.sm.get(seq)
        assert (message.state, message.available_ms) == (DELAYED, expected)
        queue.now_ms = expected - 1
        assert queue.lease() == []
        queue.now_ms = expected
    queue.check_invariants()


# ---------------------------------------------------------------------- dead letters
@pytest.mark.parametrize("max_deliveries", [1, 3])
def test_message_is_marked_dead_after_max_deliveries(max_deliveries):
    queue = memory_queue(max_deliveries=max_deliveries)
    seq, = queue.put(b"poison")
    for delivery in range(1, max_deliveries + 1):
        (leased,) = queue.lease()
        assert leased.message.delivery_count == delivery
        queue.nack(seq, delivery, reason=f"failure {delivery}".encode())
    message = queue.sm.get(seq)
    assert message.state == DEAD and message.last_error == f"failure {max_deliveries}".encode()
    assert queue.sm.counts() == (0, 0, 0, 1) and queue.lease() == []
    assert [s for s, _ in queue.sm.peek(DEAD, 10)] == [seq]
    queue.check_invariants()


def test_expiry_at_max_deliveries_also_dead_letters():
    queue = memory_queue(max_deliveries=2)
    seq, = queue.put(b"slow")
    for _ in range(2):
        queue.lease(visibility_ms=10)
        queue.advance(10)
    queue.tick()
    assert queue.sm.get(seq).state == DEAD and queue.sm.get(seq).delivery_count == 2


def test_zero_max_deliveries_never_dead_letters():
    queue = memory_queue(max_deliveries=0)
    seq, = queue.put(b"x")
    for delivery in range(1, 20):
        queue.lease()
        queue.nack(seq, delivery)
    assert queue.sm.get(seq).state == READY


def test_dead_remove_removes_only_dead_messages(queue):
    dead, alive = queue.put(b"dead", b"alive")
    queue.policy = queue.policy._replace(max_deliveries=1)
    queue.lease(max_messages=1)
    queue.nack(dead, 1)
    assert queue.dead_remove(dead, alive, 12345) == 1
    assert queue.sm.get(dead) is None and queue.sm.get(alive).state == READY
    queue.check_invariants()


def test_moved_message_keeps_its_history_and_is_deduplicated_by_origin(queue):
    copy = item(b"x", origin_id=77, delivery_count=5, enqueued_ms=3, last_error=b"boom", priority=4)
    first = queue.enqueue(copy)
    again = queue.enqueue(copy)
    assert again.messages == (Enqueued(first.messages[0].seq, True),)
    message = queue.sm.get(first.messages[0].seq)
    assert (message.origin_id, message.delivery_count, message.enqueued_ms, message.last_error, message.priority) == \
           (77, 5, 3, b"boom", 4)
    assert queue.sm.counts() == (1, 0, 0, 0)


# ---------------------------------------------------------------------- idempotency keys
def test_idempotency_key_returns_the_original_id_within_the_window(queue):
    first = queue.enqueue(item(b"a", key=b"order-1"))
    queue.advance(9_999)
    again = queue.enqueue(item(b"a-again", key=b"order-1"), item(b"b", key=b"order-2"))
    assert again.messages[0] == Enqueued(first.messages[0].seq, True)
    assert again.messages[1].duplicate is False
    assert queue.sm.counts() == (2, 0, 0, 0)


def test_idempotency_key_survives_the_ack_of_its_message(queue):
    seq, = queue.put(b"a", key=b"k")
    queue.lease()
    queue.ack((seq, 1))
    assert queue.enqueue(item(b"a", key=b"k")).messages == (Enqueued(seq, True),)
    assert queue.sm.counts() == (0, 0, 0, 0)


def test_idempotency_key_is_forgotten_after_the_window(queue):
    seq, = queue.put(b"a", key=b"k")
    queue.advance(10_000)
    queue.tick()
    assert queue.dump()["idempotency"] == {} and queue.dump()["idempotency_expiry"] == {}
    (fresh,) = queue.enqueue(item(b"a", key=b"k")).messages
    assert fresh.seq != seq and not fresh.duplicate


def test_duplicate_keys_in_one_batch_enqueue_once(queue):
    result = queue.enqueue(item(b"a", key=b"k"), item(b"b", key=b"k"))
    assert result.messages[1] == Enqueued(result.messages[0].seq, True)
    assert queue.sm.counts() == (1, 0, 0, 0)


# ---------------------------------------------------------------------- producer retries
def test_retried_enqueue_batch_returns_the_original_ids(queue):
    batch = [item(b"a"), item(b"b", key=b"k"), item(b"c", key=b"k")]
    first = queue.enqueue(*batch, producer_id=b"p" * 16, base_sequence=0)
    again = queue.enqueue(*batch, producer_id=b"p" * 16, base_sequence=0)
    assert [m.seq for m in again.messages] == [m.seq for m in first.messages]
    assert all(m.duplicate for m in again.messages)
    assert queue.sm.counts() == (2, 0, 0, 0)
    nxt = queue.enqueue(item(b"d"), producer_id=b"p" * 16, base_sequence=3)
    assert nxt.messages[0].duplicate is False


def test_out_of_order_producer_sequence_is_refused_and_changes_nothing(queue):
    queue.enqueue(item(b"a"), producer_id=b"p" * 16, base_sequence=0)
    before = queue.dump()
    refused = queue.enqueue(item(b"b"), producer_id=b"p" * 16, base_sequence=5)
    assert isinstance(refused, errors.OutOfOrderSequence) and queue.dump() == before


def test_idle_producers_are_forgotten(queue):
    queue.enqueue(item(b"a"), producer_id=b"p" * 16, base_sequence=0)
    queue.advance(POLICY.producer_idle_ms)
    queue.tick()
    assert queue.dump()["producers"] == {} and queue.dump()["producer_expiry"] == {}


# ---------------------------------------------------------------------- settlement retries
def test_a_retried_ack_batch_answers_as_its_first_attempt(queue):
    a, b = queue.put(b"a", b"b")
    queue.lease()
    first = queue.ack((a, 1), (b, 9), settler_id=b"c" * 16, sequence=1)
    before = queue.dump()
    again = queue.ack((a, 1), (b, 9), settler_id=b"c" * 16, sequence=1)
    assert [type(r) for r in first] == [type(None), errors.LeaseLost]
    assert [type(r) for r in again] == [type(None), errors.LeaseLost] and queue.dump() == before
    fresh = queue.ack((a, 1), (b, 9), settler_id=b"c" * 16, sequence=2)
    assert [type(r) for r in fresh] == [errors.UnknownMessage, errors.LeaseLost]


def test_a_retried_nack_does_not_count_a_delivery_twice(queue):
    seq, = queue.put(b"a")
    queue.lease()
    assert queue.nack(seq, 1, delay_ms=0, settler_id=b"c", sequence=5) == [None]
    assert queue.nack(seq, 1, delay_ms=0, settler_id=b"c", sequence=5) == [None]
    assert queue.sm.counts() == (1, 0, 0, 0) and queue.sm.get(seq).delivery_count == 1


def test_settlers_are_forgotten_when_idle(queue):
    seq, = queue.put(b"a")
    queue.lease()
    queue.ack((seq, 1), settler_id=b"c", sequence=1)
    queue.advance(POLICY.producer_idle_ms)
    queue.tick()
    assert queue.dump()["settlers"] == {} and queue.dump()["settler_expiry"] == {}


# ---------------------------------------------------------------------- per-message operations
def test_change_priority_of_a_ready_message_reorders_it(queue):
    a, b, c = queue.put(b"a", b"b", b"c", priority=5)
    changed = queue.change(c, priority=1)
    assert changed.priority == 1
    assert drain(queue) == [b"c", b"a", b"b"]


def test_change_priority_on_a_leased_message_keeps_the_lease_and_applies_on_return(queue):
    leased_seq, = queue.put(b"leased", priority=5)
    queue.lease()
    queue.put(b"other", priority=3)
    changed = queue.change(leased_seq, priority=1)
    assert changed.state == IN_FLIGHT and changed.priority == 1 and changed.delivery_count == 1
    assert queue.sm.counts() == (1, 0, 1, 0)
    queue.nack(leased_seq, 1, delay_ms=0)
    assert drain(queue) == [b"leased", b"other"]
    queue.check_invariants()


def test_change_deliver_at_moves_a_delayed_message_earlier_or_later(queue):
    seq, = queue.put(b"x", deliver_at_ms=queue.now_ms + 10_000)
    assert queue.change(seq, deliver_at_ms=queue.now_ms + 100).available_ms == queue.now_ms + 100
    queue.advance(100)
    assert queue.lease_values() == [b"x"]
    later, = queue.put(b"y")
    assert queue.change(later, deliver_at_ms=queue.now_ms + 50).state == DELAYED
    assert queue.lease() == []
    assert queue.change(later, deliver_at_ms=0).state == READY
    queue.check_invariants()


@pytest.mark.parametrize("state", ["leased", "dead"])
def test_rescheduling_a_leased_or_dead_message_is_refused_and_changes_nothing(state):
    queue = memory_queue(max_deliveries=1)
    seq, = queue.put(b"x")
    queue.lease()
    if state == "dead":
        queue.nack(seq, 1)
    before = queue.dump()
    assert isinstance(queue.change(seq, deliver_at_ms=queue.now_ms + 5), errors.MessageNotWaiting)
    assert queue.dump() == before


@pytest.mark.parametrize("state", ["ready", "delayed", "leased"])
def test_delete_removes_a_message_in_any_state(queue, state):
    seq, = queue.put(b"x", deliver_at_ms=queue.now_ms + 1_000 if state == "delayed" else 0)
    if state == "leased":
        queue.lease()
    assert queue.delete(seq) == [None]
    assert queue.sm.get(seq) is None and queue.sm.counts() == (0, 0, 0, 0)
    assert isinstance(queue.ack((seq, 1))[0], errors.UnknownMessage)
    assert isinstance(queue.delete(seq)[0], errors.UnknownMessage)
    queue.check_invariants()


def test_get_and_peek_show_messages_without_leasing(queue):
    queue.put(b"b", priority=2)
    seq, = queue.put(b"a", priority=1)
    assert queue.sm.get(seq).record == b"a"
    assert [m.record for _, m in queue.sm.peek(READY, 10)] == [b"a", b"b"]
    assert queue.sm.counts() == (2, 0, 0, 0)


# ---------------------------------------------------------------------- refusals, replay, time
@pytest.mark.parametrize("bad", [
    b"", b"Q", b"QE", b"Z" * 60,
    queue_commands.encode_tick(1, POLICY) + b"x",
    queue_commands.encode_ack(1, POLICY, [(1, 1)])[:-1],
    queue_commands.encode_enqueue(1, POLICY, [item(b"x")])[:-1],
    queue_commands.encode_enqueue(1, POLICY, [item(b"x", group=b"a..b")]),
    queue_commands.encode_enqueue(1, POLICY, [item(b"x", group=b"\x00")]),
    queue_commands.encode_lease(1, POLICY, 1, 1, 1) + b"\x00",
])
def test_malformed_commands_are_refused_and_change_nothing(queue, bad):
    queue.put(b"a")
    queue.lease()
    queue.put(b"b")
    before = queue.dump()
    assert isinstance(queue.apply(bad), errors.InvalidArgument)
    assert queue.dump() == before and queue.sm.applied_index() == queue.index


def test_refused_change_of_an_unknown_message_changes_nothing(queue):
    queue.put(b"a", deliver_at_ms=queue.now_ms + 5)
    queue.advance(10)
    before = queue.dump()
    assert isinstance(queue.change(999, priority=1), errors.UnknownMessage)
    assert queue.dump() == before  # not even the due work of the refused command


def test_replay_at_or_below_the_applied_index_is_ignored(queue):
    queue.put(b"a")
    command = queue_commands.encode_enqueue(queue.now_ms, POLICY, [item(b"b")])
    assert queue.sm.apply(1, command) is None and queue.sm.apply(0, command) is None
    assert queue.sm.counts() == (1, 0, 0, 0)


def test_time_never_goes_backwards(queue):
    seq, = queue.put(b"x")
    queue.lease(visibility_ms=100)
    queue.advance(100)
    queue.tick()
    assert queue.sm.get(seq).state == READY
    queue.now_ms -= 10_000  # a new leader with a slower clock
    (leased,) = queue.lease(visibility_ms=100)
    assert leased.message.deadline_ms == queue.now_ms + 10_000 + 100


def test_reload_publishes_the_stored_state(store):
    queue = QueueHarness(store)
    queue.put(b"a", b"b")
    queue.put(b"c", deliver_at_ms=queue.now_ms + 50)
    queue.lease(max_messages=1)
    reopened = QueueStateMachine(store)
    assert reopened.counts() == (1, 1, 1, 0) and reopened.applied_index() == queue.index
    assert reopened.next_due_ms() == queue.sm.next_due_ms() and reopened.deliverable()


# ---------------------------------------------------------------------- stats
def test_stats_count_per_partition_and_group_with_the_oldest_ready(queue):
    queue.put(b"a1", b"a2", group=b"acme")
    queue.advance(10)
    queue.put(b"b1", group=b"beta", deliver_at_ms=queue.now_ms + 100)
    queue.put(b"b2", group=b"beta")
    queue.lease(max_messages=1)  # a1
    stats = queue.sm.stats(groups_max=10, scan_max=100)
    assert (stats.ready, stats.delayed, stats.in_flight, stats.dead) == (2, 1, 1, 0)
    assert stats.oldest_ready_enqueued_ms == 1_000 and stats.enqueued_total == 4
    by_group = {g.group: g for g in stats.groups}
    assert by_group[b"acme"][1:] == (1, 0, 1, 0, 1_000)
    assert by_group[b"beta"][1:] == (1, 1, 0, 0, 1_010)
    assert queue.sm.stats(groups_max=1, scan_max=100).groups_truncated


@pytest.mark.parametrize("ordering", ["priority", "fair"])
def test_oldest_ready_is_found_across_priorities_and_groups(ordering):
    queue = memory_queue(ordering)
    queue.put(b"old-low", priority=9, group=b"a.x")
    queue.advance(100)
    queue.put(b"new-high", priority=1, group=b"a.x")
    queue.put(b"new-other", priority=0, group=b"b")
    queue.advance(100)
    queue.put(b"newest", priority=5, group=b"b")
    stats = queue.sm.stats(groups_max=10, scan_max=100)
    assert stats.oldest_ready_enqueued_ms == 1_000
    assert {g.group: g.oldest_ready_enqueued_ms for g in stats.groups} == {b"a.x": 1_000, b"b": 1_100}
    assert queue.sm.stats(groups_max=10, scan_max=1).oldest_ready_enqueued_ms is not None


# ---------------------------------------------------------------------- a seeded random run
@pytest.mark.parametrize("ordering", ["priority", "fair"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_runs_keep_the_invariants(ordering, seed):
    rng = random.Random(seed)
    queue = memory_queue(ordering, max_deliveries=3, backoff_base_ms=20, backoff_max_ms=200,
                         max_in_flight_per_group=2 if ordering == "fair" else 0)
    leased: list = []
    groups = [b"", b"a", b"a.x", b"a.y", b"b", b"b.z.w"]
    for _ in range(400):
        action = rng.random()
        if action < 0.35:
            queue.put(b"m", priority=rng.randint(0, 3), group=rng.choice(groups),
                      deliver_at_ms=queue.now_ms + rng.choice([0, 0, 30]), key=rng.choice([b"", b"k1", b"k2"]))
        elif action < 0.6:
            leased += queue.lease(max_messages=rng.randint(1, 4), visibility_ms=rng.choice([10, 50]))
        elif action < 0.85 and leased:
            one = leased.pop(rng.randrange(len(leased)))
            op = rng.choice(["ack", "nack", "extend", "delete", "change"])
            if op == "ack":  # with up to two more leases, and sometimes one of them named twice
                more = [leased.pop(rng.randrange(len(leased))) for _ in range(min(len(leased), rng.randint(0, 2)))]
                refs = [(m.seq, m.message.delivery_count) for m in [one, *more]]
                twice = refs[:1] if rng.random() < 0.2 else []
                queue.ack(*refs, *twice)
            elif op == "nack":
                queue.nack(one.seq, one.message.delivery_count)
            elif op == "extend":
                queue.extend(one.seq, one.message.delivery_count, 40)
            elif op == "delete":
                queue.delete(one.seq)
            else:
                queue.change(one.seq, priority=rng.randint(0, 3))
        else:
            queue.advance(rng.randint(1, 40))
            if rng.random() < 0.2:
                dead = [s for s, _ in queue.sm.peek(DEAD, 5)]
                if dead:
                    queue.dead_remove(*dead)
        queue.check_invariants()


def test_enqueue_result_shape(queue):
    result = queue.enqueue(item(b"x"))
    assert isinstance(result, EnqueueResult) and result.enqueued_ms == queue.now_ms


def test_next_delivery_is_the_delayed_messages_time_not_an_acked_leases_deadline(queue):
    """Goal: stats' next_delivery_ms is the available_ms of the earliest delayed message, whatever else the tick
    has due (the README's queue example: a message leased for 30 s and acked, one delayed by 60 s)."""
    queue.put(b"resize 42.png")
    (leased,) = queue.lease(visibility_ms=30_000)
    queue.ack((leased.seq, leased.message.delivery_count))
    later, = queue.put(b"later", deliver_at_ms=queue.now_ms + 60_000)
    queue.advance(1_000)
    stats = queue.sm.stats(groups_max=10, scan_max=100)
    assert (stats.ready, stats.delayed, stats.in_flight) == (0, 1, 0)
    assert stats.next_delivery_ms == queue.sm.get(later).available_ms == queue.now_ms - 1_000 + 60_000
    queue.delete(later)
    assert queue.sm.stats(groups_max=10, scan_max=100).next_delivery_ms is None
