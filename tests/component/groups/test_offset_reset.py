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
