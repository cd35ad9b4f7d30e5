"""Goal: a consumer's lease keeper renews what it holds before it runs out — one Extend per partition and round,
never per message, never past the maximum lease — and hands out no message whose lease is about to end."""
import pytest

from raftbus.client import errors, settings
from raftbus.client.queues.consumer import QueueConsumer, _Settlements, check_consumer_options
from raftbus.client.queues.ids import message_id
from raftbus.client.queues.leases import (
    ENDING,
    GONE,
    HANDED,
    WAITING,
    KeptSettler,
    LeaseKeeper,
    LeasePolicy,
    extend_round,
    keep_leases_round,
)
from raftbus.client.queues.messages import Message
from raftbus.client.queues.producer import QueueStubs
from raftbus.client.wire import queues_pb2 as qpb
from raftbus.client.wire import raftbus_pb2 as pb
from tests.unit.client.queues.test_queue_client import FakeChannel, FakeRouter, leased

VISIBILITY_MS = 5_000
POLICY = LeasePolicy.of(VISIBILITY_MS, 60_000, None, None)  # margins 2,000 and 1,000 ms


def messages(partition: int, count: int, first_seq: int = 1) -> list[Message]:
    return [Message.from_proto("jobs", leased(message_id(partition, seq))) for seq in
            range(first_seq, first_seq + count)]


def renew(keeper: LeaseKeeper, now_ms: int) -> dict:
    """One round, every extend answered at once: {partition: leases renewed}."""
    rounds = keeper.due(now_ms)
    for _, batch in rounds:
        for m in batch:
            keeper.extend_answered(m, now_ms, VISIBILITY_MS, None)
    return {tp[1]: len(batch) for tp, batch in rounds}


def test_margins_derive_from_visibility_and_must_nest():
    assert (POLICY.extension_margin_ms, POLICY.handoff_margin_ms) == (2_000, 1_000)
    assert LeasePolicy.of(1_000, 0, None, None).extension_margin_ms == 500
    for extension, handoff in ((5_000, 100), (1_000, 1_000), (1_000, 0)):
        with pytest.raises(errors.InvalidArgument):
            LeasePolicy.of(VISIBILITY_MS, 60_000, extension, handoff)
    with pytest.raises(errors.InvalidArgument):
        LeasePolicy.of(VISIBILITY_MS, -1, None, None)


def test_prefetch_is_bounded_so_one_extend_renews_a_partition():
    check_consumer_options(["jobs"], 2_500, 100, 1)
    with pytest.raises(errors.InvalidArgument):
        check_consumer_options(["jobs"], 2_501, 100, 1)


def test_leases_are_renewed_per_partition_before_the_margin_and_kept_alive():
    keeper = LeaseKeeper(POLICY)
    keeper.received(messages(0, 200), 0)
    keeper.received(messages(1, 200), 0)
    assert keeper.due(3_000) == []  # 2,000 ms left: not less than the margin
    assert keeper.next_due_ms(3_000) == VISIBILITY_MS - POLICY.extension_margin_ms
    assert renew(keeper, 3_400) == {0: 200, 1: 200}
    for now in range(3_500, 50_000, 250):  # up to the maximum lease, none runs out
        renew(keeper, now)
        assert keeper.held("jobs", 0) == keeper.held("jobs", 1) == 200, now
    counts = keeper.counts()
    assert counts.expired_unhanded == 0 and counts.extensions == counts.extend_requests * 200


def test_a_round_takes_the_leases_past_half_their_visibility_not_the_fresh_ones():
    keeper = LeaseKeeper(POLICY)
    keeper.received(messages(0, 10), 0)
    keeper.received(messages(0, 5, first_seq=100), 500)     # 2,100 left at 3,400: past half
    keeper.received(messages(0, 7, first_seq=200), 3_000)   # 4,600 left: fresh
    [(_, batch)] = keeper.due(3_400)
    assert sorted(m.message_id & 0xFFFF for m in batch) == [*range(1, 11), *range(100, 105)]
    assert keeper.due(3_401) == []  # the chosen ones are being extended; the others are not due


def test_leases_arriving_one_by_one_are_renewed_in_rounds_a_margin_apart():
    """A lease arriving every 10 ms for 10 s (a consumer whose acks free its prefetch one at a time), with
    visibility_ms twice the margin: each round also takes the leases not yet at the margin, so rounds come at
    least one margin apart instead of one per arrival, and no lease runs out."""
    policy = LeasePolicy.of(3_000, 60_000, None, None)  # margins 1,500 and 750 ms
    keeper, rounds, seq = LeaseKeeper(policy), 0, 1
    for now_ms in range(0, 10_000, 10):
        keeper.received(messages(0, 1, seq), now_ms)
        seq += 1
        for _, batch in keeper.due(now_ms):
            rounds += 1
            for m in batch:
                keeper.extend_answered(m, now_ms, policy.visibility_ms, None)
    assert keeper.counts().expired_unhanded == 0
    assert rounds <= 10_000 // policy.extension_margin_ms + 1, rounds


def test_one_extend_request_per_partition_and_round_never_one_per_message():
    channel = FakeChannel({"Extend": lambda r: qpb.QueueBatchResponse(
        results=[qpb.QueueItemResult(lease_deadline_ms=9_999) for _ in r.extensions])})
    router = FakeRouter(channel)
    settlements = _Settlements(router, QueueStubs(router), linger_s=0.0, timeout_s=1.0)
    keeper = LeaseKeeper(POLICY)
    keeper.received(messages(0, 300) + messages(2, 250), 0)
    for _, batch in keeper.due(3_400):
        futures = extend_round(settlements, keeper, batch, 3_400)
        assert all(f.result(5) == 9_999 for f in futures)
    settlements.close(1)
    extends = sorted((r.partition, len(r.extensions)) for name, r in channel.requests if name == "Extend")
    assert extends == [(0, 300), (2, 250)]
    assert keeper.due(3_400 + VISIBILITY_MS - POLICY.extension_margin_ms - 1) == []  # renewed from 3,400


def test_no_extension_takes_a_lease_past_the_maximum():
    keeper = LeaseKeeper(LeasePolicy.of(VISIBILITY_MS, 10_000, None, None))
    keeper.received(messages(0, 3), 0)
    assert renew(keeper, 3_400) == {0: 3}            # 3,400 + 5,000 <= 10,000
    assert renew(keeper, 6_800) == {}                 # 6,800 + 5,000 > 10,000: left to run out at 8,400
    assert keeper.held("jobs", 0) == 3 and keeper.next_due_ms(6_800) == 8_400
    assert keeper.due(8_400) == [] and keeper.held("jobs", 0) == 0
    assert keeper.counts().expired_unhanded == 3


def test_extension_off_never_renews():
    keeper = LeaseKeeper(LeasePolicy.of(VISIBILITY_MS, 0, None, None))
    keeper.received(messages(0, 3), 0)
    assert renew(keeper, 4_000) == {}


def test_refused_extensions_drop_the_lease_and_failed_ones_are_tried_again():
    keeper = LeaseKeeper(POLICY)
    lost, kept = messages(0, 2)
    keeper.received([lost, kept], 0)
    [(_, batch)] = keeper.due(3_400)
    keeper.extend_answered(lost, 3_400, VISIBILITY_MS, errors.LeaseLost("gone"))
    keeper.extend_answered(kept, 3_400, VISIBILITY_MS, errors.Unavailable("no leader"))
    assert keeper.held("jobs", 0) == 1 and keeper.counts().extensions_refused == 1
    assert keeper.due(3_500) == [(("jobs", 0), [kept])]  # still due, asked again


def test_hand_off_refuses_messages_about_to_run_out():
    keeper = LeaseKeeper(LeasePolicy.of(VISIBILITY_MS, 0, None, None))
    fresh, ending, late = messages(0, 3)
    keeper.received([fresh, ending, late], 0)
    assert keeper.take(fresh, VISIBILITY_MS - POLICY.handoff_margin_ms) == HANDED
    assert keeper.take(ending, VISIBILITY_MS - POLICY.handoff_margin_ms + 1) == ENDING
    assert keeper.take(late, VISIBILITY_MS) == GONE
    assert keeper.take(ending, 0) == GONE  # no longer held: given back once
    counts = keeper.counts()
    assert (counts.returned_unhanded, counts.expired_unhanded) == (1, 1)
    assert keeper.held("jobs", 0) == 1  # the handed one, until it is settled


def test_settling_ends_the_keeping_and_an_applications_extend_moves_the_deadline():
    channel = FakeChannel({
        "Ack": lambda r: qpb.QueueBatchResponse(),
        "Extend": lambda r: qpb.QueueBatchResponse(results=[qpb.QueueItemResult(lease_deadline_ms=1)
                                                            for _ in r.extensions])})
    router = FakeRouter(channel)
    settlements = _Settlements(router, QueueStubs(router), linger_s=0.0, timeout_s=1.0)
    released = []
    keeper = LeaseKeeper(POLICY, on_released=lambda: released.append(1))
    clock = [0]
    settler = KeptSettler(settlements, keeper, lambda: clock[0])
    acked, extended = (Message.from_proto("jobs", leased(message_id(0, seq)), settler) for seq in (1, 2))
    keeper.received([acked, extended], 0)
    acked.ack().result(5)
    assert keeper.held("jobs", 0) == 1 and released == [1]
    clock[0] = 1_000
    extended.extend(20_000).result(5)
    assert keeper.due(19_000) == [] and keeper.next_due_ms(19_000) == 21_000 - POLICY.extension_margin_ms
    settlements.close(1)


def test_refused_lease_answer_reaches_the_keeper_from_a_batch_response():
    channel = FakeChannel({"Extend": lambda r: qpb.QueueBatchResponse(results=[
        qpb.QueueItemResult(error=pb.Error(code="LEASE_LOST", message="gone")), qpb.QueueItemResult(lease_deadline_ms=9)])})
    router = FakeRouter(channel)
    settlements = _Settlements(router, QueueStubs(router), linger_s=0.0, timeout_s=1.0)
    keeper = LeaseKeeper(POLICY)
    batch = messages(0, 2)
    keeper.received(batch, 0)
    [(_, due)] = keeper.due(3_400)
    futures = extend_round(settlements, keeper, due, 3_400)
    assert isinstance(futures[0].exception(5), errors.LeaseLost) and futures[1].result(5) == 9
    settlements.close(1)
    assert keeper.held("jobs", 0) == 1


def test_consumer_refuses_a_prefetch_it_could_not_keep_alive():
    with pytest.raises(errors.InvalidArgument):
        QueueConsumer("127.0.0.1:1", topics=["jobs"], prefetch=100_000)


class EndingStream:
    """A lease stream's call: yields its answers, then ends (as a broker going away ends it)."""

    def __init__(self, answers):
        self.answers = list(answers)

    def __iter__(self):
        return iter(self.answers)

    def cancel(self):
        pass


class ReopeningRouter(FakeRouter):
    def note_failure(self, err, attempt, topic=None, partition=None):
        return 0.01


def test_a_failed_stream_reopens_only_once_fewer_than_prefetch_leases_are_held():
    from tests.helpers import wait_until

    opened = []
    answer = qpb.LeaseResponse(messages=[leased(message_id(0, seq)) for seq in (1, 2)])

    def lease_stream(request):
        opened.append(request.max_in_flight)
        return EndingStream([answer] if len(opened) == 1 else [])

    channel = FakeChannel({"LeaseStream": lease_stream, "Ack": lambda r: qpb.QueueBatchResponse()})
    consumer = QueueConsumer(router=ReopeningRouter(channel, partitions=1), topics=["jobs"], partitions=[0],
                             prefetch=2, visibility_ms=VISIBILITY_MS)
    try:
        held = wait_until(lambda: consumer.poll(0.1, max_messages=2), 5, what="the two leased messages")
        held += consumer.poll(0.1, max_messages=2 - len(held)) if len(held) < 2 else []
        assert len(held) == 2
        with pytest.raises(AssertionError):  # both leases held: the ended stream stays closed
            wait_until(lambda: len(opened) > 1, 1.0, what="a reopened stream")
        held[0].ack().result(5)
        wait_until(lambda: len(opened) > 1, 5, what="the stream reopened once a lease was settled")
    finally:
        consumer.close(1)


class RecordingSettlements:
    """extend_many answered at once; closed, it refuses as the real settlements do once closed."""

    def __init__(self):
        self.rounds, self.closed = [], False

    def extend_many(self, batch, visibility_ms):
        from concurrent.futures import Future

        if self.closed:
            raise errors.Unavailable("closed")
        self.rounds.append((len(batch), visibility_ms))
        futures = [Future() for _ in batch]
        for future in futures:
            future.set_result(9)
        return futures


def test_a_keeper_round_renews_what_is_due_and_sleeps_until_the_next_lease_is_due():
    keeper, settlements, clock = LeaseKeeper(POLICY), RecordingSettlements(), [0]
    keeper.received(messages(0, 3) + messages(1, 2), 0)
    due_ms = VISIBILITY_MS - POLICY.extension_margin_ms  # nothing due yet: sleep until then, at most a check interval
    assert keeper_round_s(settlements, keeper, clock) == min(due_ms, settings.QUEUE_LEASE_CHECK_MAX_MS) / 1000
    assert settlements.rounds == []
    clock[0] = due_ms + 1  # every lease now has less than the margin left
    wait_s = keeper_round_s(settlements, keeper, clock)
    assert sorted(settlements.rounds) == [(2, VISIBILITY_MS), (3, VISIBILITY_MS)]  # one Extend per partition
    assert 0 < wait_s <= settings.QUEUE_LEASE_CHECK_MAX_MS / 1000
    settlements.closed = True
    clock[0] += VISIBILITY_MS - POLICY.extension_margin_ms + 1  # due again, and the settlements refuse
    assert keeper_round_s(settlements, keeper, clock) is None  # closed: the keeper stops


def keeper_round_s(settlements, keeper, clock):
    return keep_leases_round(settlements, keeper, lambda: clock[0])


def test_a_lease_whose_extend_waits_for_a_new_leader_is_kept_until_the_answer():
    """An extend held up by a failover past the lease's deadline: the lease is kept (the new leader's grace may
    still renew it), and a late answer counts from the answer less the hand-off margin; a refusal drops it."""
    policy = LeasePolicy.of(3_000, 60_000, None, None)  # margins 1,500 and 750 ms
    keeper = LeaseKeeper(policy)
    renewed, lost = messages(0, 2)
    keeper.received([renewed, lost], 0)
    [(_, batch)] = keeper.due(1_600)
    assert batch == [renewed, lost]
    assert keeper.take(renewed, 2_500) == WAITING  # 500 ms left, its extend unanswered: not handed out yet
    assert keeper.due(3_000) == [] and keeper.due(5_000) == [] and keeper.held("jobs", 0) == 2  # still unanswered
    assert keeper.next_due_ms(5_000) is None  # nothing to wake up for until the answers
    keeper.extend_answered(renewed, 1_600, 3_000, None, answered_ms=5_000)
    keeper.extend_answered(lost, 1_600, 3_000, errors.LeaseLost("expired"), answered_ms=5_000)
    assert keeper.held("jobs", 0) == 1 and keeper.counts().expired_unhanded == 0
    assert keeper.take(renewed, 5_000) == HANDED  # deadline 5,000 - 750 + 3,000 = 7,250
    assert keeper.next_due_ms(5_000) == 7_250 - policy.extension_margin_ms
