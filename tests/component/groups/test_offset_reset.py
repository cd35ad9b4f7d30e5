"""Goal: an operator's offset reset moves a group's committed offset anywhere inside the log, backwards too, but
only while the group has no members, and never overwrites a commit from a generation the partition saw later."""
import pytest

from raftbus.client import errors
from tests.component.broker_harness import Broker

G = "billing"
TOPIC = "orders"


@pytest.fixture
def broker():
    b = Broker(session_timeout_ms=10_000, session_timeout_min_ms=1_000, heartbeat_interval_ms=500,
               rebalance_timeout_ms=20_000)
    b.create_topic(TOPIC, partitions=2)
    b.produce(TOPIC, 0, 10)
    return b


def member_commits(broker, offset: int) -> tuple[str, int]:
    """A member joins, owns both partitions and commits `offset` on partition 0; returns (member, generation)."""
    member = broker.groups.join(G, member_id="", client_id="test", topics=[TOPIC], session_timeout_ms=0,
                                rebalance_timeout_ms=0).member_id
    view = broker.groups.sync(G, member, broker.metadata_sm.group(G).generation, ())
    broker.offsets.commit(G, member_id=member, generation=view.generation, topic=TOPIC, partition=0, offset=offset)
    return member, view.generation


def test_reset_of_an_empty_group_moves_the_offset_back(broker):
    member, _ = member_commits(broker, 8)
    broker.groups.leave(G, member)
    stored = broker.offsets.reset(G, topic=TOPIC, partition=0, offset=2)
    assert stored.offset == 2
    assert broker.offsets.fetch(G, TOPIC, 0).committed.offset == 2
    assert broker.offsets.fetch(G, TOPIC, 0).lag_records == 8


def test_reset_of_a_group_that_never_committed_creates_its_offset(broker):
    assert broker.offsets.reset(G, topic=TOPIC, partition=0, offset=10).offset == 10
    assert broker.offsets.fetch(G, TOPIC, 0).lag_records == 0


def test_reset_is_refused_while_the_group_has_members(broker):
    member_commits(broker, 8)
    with pytest.raises(errors.GroupNotEmpty, match="stop its consumers"):
        broker.offsets.reset(G, topic=TOPIC, partition=0, offset=0)
    assert broker.offsets.fetch(G, TOPIC, 0).committed.offset == 8


@pytest.mark.parametrize("offset", [-1, 11])
def test_reset_outside_the_log_is_out_of_range(broker, offset):
    with pytest.raises(errors.OffsetOutOfRange):
        broker.offsets.reset(G, topic=TOPIC, partition=0, offset=offset)
    assert broker.offsets.fetch(G, TOPIC, 0).committed is None


def test_members_commit_over_a_reset_and_keep_their_fencing(broker):
    member, generation = member_commits(broker, 8)
    broker.groups.leave(G, member)
    reset = broker.offsets.reset(G, topic=TOPIC, partition=0, offset=1)
    assert reset.highest_generation == generation  # the reset keeps the partition's fence where it was
    _, newer = member_commits(broker, 5)
    committed = broker.offsets.fetch(G, TOPIC, 0).committed
    assert newer > generation and (committed.offset, committed.highest_generation) == (5, newer)
    with pytest.raises(errors.UnknownMember):  # the member that left cannot commit over the new one
        broker.offsets.commit(G, member_id=member, generation=generation, topic=TOPIC, partition=0, offset=9)


def test_a_registered_group_is_listed_and_described_empty_with_its_topics(broker):
    """What an operator's reset or a restore does first: the group exists without members, holding the topic, so
    `groups list` and `groups describe` show it (state empty) before any consumer joins."""
    broker.create_topic("payments", partitions=1)
    registered = broker.groups.register("restored", ["orders"])
    assert (registered.state, registered.topics, registered.members) == ("empty", ("orders",), {})
    assert broker.offsets.reset("restored", topic=TOPIC, partition=0, offset=4).offset == 4
    assert [g.name for g in broker.groups.list_groups()] == ["restored"]
    assert broker.groups.describe_group("restored").topics == ("orders",)
    assert broker.groups.register("restored", ["payments"]).topics == ("orders", "payments")
    applied = broker.metadata_sm.applied_index()
    assert broker.groups.register("restored", ["orders"]).topics == ("orders", "payments")
    assert broker.metadata_sm.applied_index() == applied  # nothing to change: a read, no command


def test_registering_a_group_with_members_leaves_it_as_its_members_made_it(broker):
    member, generation = member_commits(broker, 8)
    broker.create_topic("payments", partitions=1)
    group = broker.groups.register(G, ["payments"])
    assert group.topics == ("orders",) and list(group.members) == [member] and group.generation == generation
    with pytest.raises(errors.GroupNotEmpty):
        broker.offsets.reset(G, topic=TOPIC, partition=0, offset=0)


@pytest.mark.parametrize("topics, error", [
    (["nope"], errors.UnknownTopic),
    (["jobs"], errors.WrongTopicKind),
    ([], errors.InvalidArgument),
])
def test_register_refusals(broker, topics, error):
    broker.create_topic("jobs", partitions=1, kind="queue")
    with pytest.raises(error):
        broker.groups.register("restored", topics)
    assert broker.metadata_sm.group("restored") is None


def test_a_registered_empty_group_is_deleted_after_its_retention_like_any_empty_group():
    b = Broker(group_empty_retention_ms=60_000)
    b.create_topic(TOPIC, partitions=1)
    b.groups.register("restored", [TOPIC])
    b.groups.expire_due()
    b.clock.advance(60_000)
    b.groups.expire_due()
    assert b.metadata_sm.group("restored") is not None
    b.clock.advance(1)
    b.groups.expire_due()
    assert b.metadata_sm.group("restored") is None
