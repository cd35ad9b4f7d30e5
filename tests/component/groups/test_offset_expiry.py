"""Goal: a partition leader drops the committed offsets of a group that no longer exists once they are older than
offsets_retention_ms, and keeps those of live groups and of groups committed recently."""
from raftbus.broker.groups import commands as group_commands
from tests.component.broker_harness import Broker

TOPIC = "orders"
RETENTION_MS = 60_000


def settled_member(broker, group):
    member = broker.groups.join(group, member_id="", client_id="test", topics=[TOPIC], session_timeout_ms=0,
                                rebalance_timeout_ms=0).member_id
    view = broker.groups.sync(group, member, broker.metadata_sm.group(group).generation)
    return member, view


def commit_everywhere(broker, group, offset):
    member, view = settled_member(broker, group)
    for topic, partition in view.owned:
        broker.offsets.commit(group, member_id=member, generation=view.generation, topic=topic, partition=partition,
                              offset=offset)
    return member


def committed(broker, group):
    return {r.partition: r.state_machine.committed(group) for r in broker.context.partitions.values()}


def expire_round(broker):
    live = set(broker.metadata_sm.groups())
    return {r.partition: broker.offsets.expire_if_due(r, live) for r in broker.context.partitions.values()}


def test_offsets_of_a_deleted_group_expire_after_the_retention_and_others_stay():
    broker = Broker(offsets_retention_ms=RETENTION_MS, group_empty_retention_ms=10_000, session_timeout_ms=10_000,
                    session_timeout_min_ms=1_000, heartbeat_interval_ms=500)
    broker.create_topic(TOPIC, partitions=2)
    for partition in range(2):
        broker.produce(TOPIC, partition, 5)
    gone = commit_everywhere(broker, "gone", 3)
    commit_everywhere(broker, "alive", 4)
    broker.groups.leave("gone", gone)
    broker.groups.expire_due()  # this broker's controller duties start now

    broker.clock.advance(RETENTION_MS + 1)
    assert expire_round(broker) == {0: [], 1: []}  # "gone" still exists (empty, not yet deleted)
    broker.groups.expire_due()  # empty past group_empty_retention_ms: deleted ("alive" only loses its member)
    assert "gone" not in broker.metadata_sm.groups() and "alive" in broker.metadata_sm.groups()

    assert expire_round(broker) == {0: ["gone"], 1: ["gone"]}
    assert all(c is None for c in committed(broker, "gone").values())
    assert all(c.offset == 4 for c in committed(broker, "alive").values())
    assert expire_round(broker) == {0: [], 1: []}


def test_a_deleted_group_committed_within_the_retention_keeps_its_offsets():
    broker = Broker(offsets_retention_ms=RETENTION_MS)
    broker.create_topic(TOPIC, partitions=1)
    broker.produce(TOPIC, 0, 5)
    replica = next(iter(broker.context.partitions.values()))
    replica.group.submit(group_commands.encode_commit_offset(group="orphan", member_id="m", generation=1, offset=2, metadata="",
                                                 reset=False, now_ms=broker.clock.now_ms()))
    broker.clock.advance(RETENTION_MS - 1)
    assert broker.offsets.expire_if_due(replica, live_groups=set()) == []
    broker.clock.advance(2)
    assert broker.offsets.expire_if_due(replica, live_groups=set()) == ["orphan"]
    assert replica.state_machine.committed("orphan") is None


def test_expiry_is_off_with_retention_minus_one_and_bounded_per_command():
    broker = Broker(offsets_retention_ms=-1)
    broker.create_topic(TOPIC, partitions=1)
    broker.produce(TOPIC, 0, 5)
    replica = next(iter(broker.context.partitions.values()))
    for name in ("a", "b", "c"):
        replica.group.submit(group_commands.encode_commit_offset(group=name, member_id="m", generation=1, offset=1, metadata="",
                                                     reset=False, now_ms=broker.clock.now_ms()))
    broker.clock.advance(10 ** 12)
    assert broker.offsets.expire_if_due(replica, live_groups=set()) == []
    bounded = Broker(offsets_retention_ms=1, offsets_expire_groups_per_command_max=2)
    bounded.context.partitions = broker.context.partitions
    bounded.clock.advance(10 ** 12)
    assert bounded.offsets.expire_if_due(replica, live_groups=set()) == ["a", "b"]
    assert bounded.offsets.expire_if_due(replica, live_groups=set()) == ["c"]
