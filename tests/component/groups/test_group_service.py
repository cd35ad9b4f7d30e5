"""Goal: the group and offset services hand partitions over without two owners, push rebalances through long-poll
heartbeats, expire silent or stuck members from the controller's clock, grant a grace period after a controller
failover, and fence stale, foreign or lagging-replica requests with typed errors."""
import threading
import time

import pytest

from raftbus.client import errors
from tests.component.broker_harness import Broker

G = "readers"
TOPIC = "orders"


@pytest.fixture
def broker():
    b = Broker(session_timeout_ms=10_000, session_timeout_min_ms=1_000, heartbeat_interval_ms=500,
               rebalance_timeout_ms=20_000)
    b.create_topic(TOPIC, partitions=4)
    return b


def join(broker, member_id="", topics=(TOPIC,), **kwargs):
    return broker.groups.join(G, member_id=member_id, client_id="test", topics=list(topics),
                              session_timeout_ms=kwargs.pop("session_timeout_ms", 0),
                              rebalance_timeout_ms=kwargs.pop("rebalance_timeout_ms", 0))


def sync(broker, member_id, generation=None, released=()):
    if generation is None:
        generation = broker.metadata_sm.group(G).generation
    return broker.groups.sync(G, member_id, generation, released)


def settle_two(broker):
    """Members a and b, hand-over done: returns (a, b, their views)."""
    a = join(broker).member_id
    b = join(broker).member_id
    view_a = sync(broker, a)
    sync(broker, a, view_a.generation, view_a.revoking)
    return a, b, sync(broker, a), sync(broker, b)


def test_join_answers_ids_timeouts_and_heartbeat_interval(broker):
    answer = join(broker)
    assert answer.member_id.startswith("test-") and answer.generation == broker.metadata_sm.group(G).generation
    assert (answer.session_timeout_ms, answer.rebalance_timeout_ms, answer.heartbeat_interval_ms) == (10_000, 20_000,
                                                                                                      500)
    assert join(broker, session_timeout_ms=1_500).heartbeat_interval_ms == 500
    assert join(broker, session_timeout_ms=1_200).heartbeat_interval_ms == 400


def test_hand_over_commits_before_release_and_never_has_two_owners(broker):
    a = join(broker).member_id
    first = sync(broker, a)
    assert len(first.owned) == 4 and first.revoking == ()
    b = join(broker).member_id
    view_b = sync(broker, b)
    assert view_b.owned == () and len(view_b.pending) == 2
    view_a = sync(broker, a)
    assert set(view_a.revoking) == set(view_b.pending)
    for topic, partition in view_a.revoking:  # still owned: the old owner may commit what it processed
        broker.offsets.commit(G, member_id=a, generation=first.generation, topic=topic, partition=partition, offset=0)
    after = sync(broker, a, view_a.generation, view_a.revoking)
    assert after.generation > view_a.generation and set(after.owned) == set(view_a.owned) - set(view_a.revoking)
    view_b = sync(broker, b)
    assert set(view_b.owned) == set(view_a.revoking) and view_b.pending == ()
    assert set(view_b.owned).isdisjoint(after.owned)
    topic, partition = view_b.owned[0]
    with pytest.raises(errors.PartitionNotAssigned):
        broker.offsets.commit(G, member_id=a, generation=after.generation, topic=topic, partition=partition, offset=0)
    broker.offsets.commit(G, member_id=b, generation=view_b.generation, topic=topic, partition=partition, offset=0)


def test_group_fetch_is_fenced(broker):
    a, b, view_a, view_b = settle_two(broker)
    topic, partition = view_a.owned[0]
    broker.produce(topic, partition, 3)
    result = broker.log.fetch(topic, partition, 0, max_bytes=1 << 20, max_wait_ms=0,
                              member=(G, a, view_a.generation))
    assert result.high_watermark == 3
    with pytest.raises(errors.PartitionNotAssigned):
        broker.log.fetch(topic, partition, 0, max_bytes=1 << 20, max_wait_ms=0, member=(G, b, view_b.generation))
    with pytest.raises(errors.UnknownMember):
        broker.log.fetch(topic, partition, 0, max_bytes=1 << 20, max_wait_ms=0, member=(G, "zombie", 1))
    with pytest.raises(errors.StaleGeneration):
        broker.log.fetch(topic, partition, 0, max_bytes=1 << 20, max_wait_ms=0, member=(G, a, 0))


def test_commit_from_before_regaining_a_partition_is_stale(broker):
    a, b, view_a, view_b = settle_two(broker)
    old_generation = view_b.generation
    tp = view_b.owned[0]
    broker.groups.leave(G, b)  # b's partitions go back to a at a newer generation
    regained = sync(broker, a)
    assert tp in regained.owned and broker.metadata_sm.group(G).owners[tp].since_generation > view_a.generation
    with pytest.raises(errors.StaleGeneration):
        broker.offsets.commit(G, member_id=a, generation=view_a.generation, topic=tp[0], partition=tp[1], offset=0)
    assert old_generation < regained.generation
    broker.offsets.commit(G, member_id=a, generation=regained.generation, topic=tp[0], partition=tp[1], offset=0)


def test_heartbeat_long_poll_answers_at_once_when_the_generation_moves(broker):
    a = join(broker).member_id
    generation = sync(broker, a).generation
    assert broker.groups.heartbeat(G, a, generation, max_wait_ms=0) == (generation, False)
    answers = []
    waiting = threading.Thread(target=lambda: answers.append(broker.groups.heartbeat(G, a, generation, 30_000)))
    started = time.monotonic()
    waiting.start()
    time.sleep(0.05)  # let the heartbeat reach its wait; the join below is what must wake it
    join(broker)
    waiting.join(5)
    new_generation = broker.metadata_sm.group(G).generation
    assert answers == [(new_generation, True)] and time.monotonic() - started < 0.45  # well before its 500 ms cap


def test_heartbeat_refusals(broker):
    a = join(broker).member_id
    with pytest.raises(errors.UnknownMember):
        broker.groups.heartbeat(G, "nobody", 1)
    with pytest.raises(errors.UnknownGroup):
        broker.groups.heartbeat("other", a, 1)
    with pytest.raises(errors.MetadataBehind):
        broker.groups.heartbeat(G, a, broker.metadata_sm.applied_index() + 5)
    broker.metadata_group.set_leader(None)
    with pytest.raises(errors.LeaderNotAvailable):
        broker.groups.heartbeat(G, a, 1)


def test_heartbeat_to_a_follower_names_the_controller(broker):
    broker.admin.register_broker(2, "127.0.0.1:3", "127.0.0.1:4")
    a = join(broker).member_id
    broker.metadata_group.set_leader(2)
    with pytest.raises(errors.NotLeader) as caught:
        broker.groups.heartbeat(G, a, 1)
    assert (caught.value.leader_id, caught.value.leader_address) == (2, "127.0.0.1:3")


def test_silent_member_expires_and_its_partitions_move(broker):
    a, b, view_a, _ = settle_two(broker)
    broker.groups.expire_due()
    for _ in range(3):
        broker.clock.advance(4_000)
        broker.groups.heartbeat(G, a, view_a.generation)
        broker.groups.expire_due()
    group = broker.metadata_sm.group(G)
    assert sorted(group.members) == [a] and len(group.owned_by(a)) == 4
    with pytest.raises(errors.UnknownMember):
        broker.groups.heartbeat(G, b, 1)


def test_member_holding_revoked_partitions_too_long_is_removed(broker):
    a = join(broker, rebalance_timeout_ms=3_000).member_id
    sync(broker, a)
    b = join(broker).member_id
    broker.groups.expire_due()
    for _ in range(4):  # both heartbeat, but a never releases what it must give up
        broker.clock.advance(1_000)
        for member in (a, b):
            broker.groups.heartbeat(G, member, 1)
        broker.groups.expire_due()
    group = broker.metadata_sm.group(G)
    assert sorted(group.members) == [b] and len(group.owned_by(b)) == 4


def test_new_controller_gives_every_member_a_grace_period(broker):
    a, b, _, _ = settle_two(broker)
    broker.groups.expire_due()
    broker.clock.advance(9_000)
    broker.metadata_group.set_leader(None)  # the controller fails over (here: back to this broker)
    broker.groups.expire_due()
    broker.metadata_group.set_leader(1)
    broker.groups.expire_due()  # the new controller's first check marks the takeover
    broker.clock.advance(2_000)  # 11 s since the last heartbeats, but only 2 s since the takeover
    broker.groups.expire_due()
    assert sorted(broker.metadata_sm.group(G).members) == sorted([a, b])
    broker.clock.advance(8_001)
    broker.groups.expire_due()
    assert broker.metadata_sm.group(G).members == {}


def test_empty_group_is_deleted_after_its_retention():
    b = Broker(group_empty_retention_ms=60_000)
    b.create_topic(TOPIC)
    member = join(b).member_id
    b.groups.leave(G, member)
    b.groups.expire_due()
    b.clock.advance(60_000)
    b.groups.expire_due()
    assert b.metadata_sm.group(G) is not None
    b.clock.advance(1)
    b.groups.expire_due()
    assert b.metadata_sm.group(G) is None


def test_lagging_metadata_replica_answers_retriable_and_the_partition_fences_the_rest(broker):
    a = join(broker).member_id
    view_a = sync(broker, a)
    tp = view_a.owned[0]
    lagging = broker.lagging_copy(len(broker.metadata_group.log))  # knows a owns everything
    b = join(broker).member_id
    view_b = sync(broker, b)
    with pytest.raises(errors.MetadataBehind) as caught:
        lagging.offsets.commit(G, member_id=b, generation=view_b.generation, topic=tp[0], partition=tp[1], offset=0)
    assert caught.value.retriable
    moving = sync(broker, a).revoking
    sync(broker, a, view_b.generation, moving)
    view_b = sync(broker, b)
    tp = view_b.owned[0]
    broker.offsets.commit(G, member_id=b, generation=view_b.generation, topic=tp[0], partition=tp[1], offset=0)
    # a's late commit through the lagging broker passes its metadata check but not the partition's own fence
    with pytest.raises(errors.StaleGeneration):
        lagging.offsets.commit(G, member_id=a, generation=view_a.generation, topic=tp[0], partition=tp[1], offset=0)


def test_the_new_owners_start_read_fences_a_zombie_commit_through_a_lagging_replica(broker):
    """The new owner has not committed yet, only read its start position (as the SDK does on gaining a partition);
    the old owner's commit through a broker whose metadata replica still names it owner is refused by the
    partition's own state, and the new owner's first commit is not refused as an offset regression."""
    a = join(broker).member_id
    view_a = sync(broker, a)
    lagging = broker.lagging_copy(len(broker.metadata_group.log))  # knows a owns everything
    b = join(broker).member_id
    sync(broker, b)
    moving = sync(broker, a).revoking
    sync(broker, a, view_a.generation, moving)
    view_b = sync(broker, b)
    tp = view_b.owned[0]
    start = broker.offsets.fetch(G, tp[0], tp[1], consistent=True, member=(b, view_b.generation))
    assert start.committed is None
    with pytest.raises(errors.StaleGeneration):
        lagging.offsets.commit(G, member_id=a, generation=view_a.generation, topic=tp[0], partition=tp[1], offset=0)
    stored = broker.offsets.commit(G, member_id=b, generation=view_b.generation, topic=tp[0], partition=tp[1],
                                   offset=0)
    assert stored.offset == 0 and stored.generation == view_b.generation


def test_a_start_read_is_checked_like_a_commit(broker):
    """Only the owner at its generation may fence: another member's start read is refused."""
    a = join(broker).member_id
    view_a = sync(broker, a)
    tp = view_a.owned[0]
    with pytest.raises(errors.UnknownMember):
        broker.offsets.fetch(G, tp[0], tp[1], consistent=True, member=("nobody", view_a.generation))
    with pytest.raises(errors.MetadataBehind):
        broker.offsets.fetch(G, tp[0], tp[1], consistent=True, member=(a, view_a.generation + 1000))


def test_offsets_never_go_back_without_reset_and_report_lag(broker):
    a = join(broker).member_id
    view = sync(broker, a)
    topic, partition = view.owned[0]
    broker.produce(topic, partition, 5)
    broker.clock.advance(1_000)
    broker.produce(topic, partition, 5)

    def commit(offset, reset=False):
        return broker.offsets.commit(G, member_id=a, generation=view.generation, topic=topic, partition=partition,
                                     offset=offset, reset=reset)

    assert broker.offsets.fetch(G, topic, partition).lag_records == -1
    commit(7)
    with pytest.raises(errors.OffsetRegression):
        commit(3)
    commit(3, reset=True)
    broker.clock.advance(2_000)
    lag = broker.offsets.fetch(G, topic, partition, consistent=True)
    assert (lag.committed.offset, lag.lag_records, lag.lag_ms, lag.high_watermark) == (3, 7, 3_000, 10)
    commit(10)
    assert broker.offsets.fetch(G, topic, partition).lag_ms == 0
    with pytest.raises(errors.OffsetOutOfRange):
        commit(11)


def test_topic_changes_rebalance_groups(broker):
    a, b, _, _ = settle_two(broker)
    broker.alter_partitions(TOPIC, 6)
    group = broker.metadata_sm.group(G)
    assert sorted(len(group.owned_by(m)) for m in (a, b)) == [3, 3]
    broker.create_topic("audit", partitions=2)
    join(broker, member_id=a, topics=(TOPIC, "audit"))
    assert {tp[0] for tp in broker.metadata_sm.group(G).members[a].target} == {TOPIC, "audit"}
    broker.admin.delete_topic("audit")
    assert all(tp[0] == TOPIC for tp in broker.metadata_sm.group(G).owners)


@pytest.mark.parametrize("kwargs, error", [
    ({"topics": ("nope",)}, errors.UnknownTopic),
    ({"topics": ("jobs",)}, errors.WrongTopicKind),
    ({"topics": ()}, errors.InvalidArgument),
    ({"session_timeout_ms": 999}, errors.InvalidSessionTimeout),
    ({"session_timeout_ms": 2_000_000}, errors.InvalidSessionTimeout),
    ({"rebalance_timeout_ms": 2_000_000}, errors.InvalidSessionTimeout),
    ({"member_id": "never-joined"}, errors.UnknownMember),
])
def test_join_refusals(broker, kwargs, error):
    broker.create_topic("jobs", kind="queue")
    with pytest.raises(error):
        join(broker, **kwargs)
    assert broker.metadata_sm.group(G) is None


def test_group_limits():
    b = Broker(group_members_max=2, groups_max=1)
    b.create_topic(TOPIC)
    join(b)
    join(b)
    with pytest.raises(errors.GroupLimitReached):
        join(b)
    with pytest.raises(errors.GroupLimitReached):
        b.groups.join("second", member_id="", client_id="", topics=[TOPIC], session_timeout_ms=0,
                      rebalance_timeout_ms=0)


def test_describe_and_list(broker):
    a, b, _, _ = settle_two(broker)
    described = broker.groups.describe_group(G)
    assert described.state == "stable" and sorted(described.members) == sorted([a, b])
    assert [g.name for g in broker.groups.list_groups()] == [G]
    with pytest.raises(errors.UnknownGroup):
        broker.groups.describe_group("nope")
