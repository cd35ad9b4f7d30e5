"""Goal: the replica set opens the partition replicas the metadata places on its broker and no others, drops those
it no longer does (group off the loop, store closed, files deleted, fetchers woken), closes a replica whose
placement went away while it opened, and never lets a replica that failed to open keep the others from opening."""
from __future__ import annotations

import pytest

from raftbus.broker.context import partition_group_id
from raftbus.client import errors
from tests.component.harness import OpenWhenTold, ServiceBroker


def placed_here(broker, name):
    topic = broker.metadata_sm.topic(name)
    return {partition_group_id(topic.topic_id, p.partition) for p in topic.partitions if 1 in p.hosts}


def test_it_opens_what_the_metadata_places_here_and_nothing_else():
    broker = ServiceBroker(brokers=(1, 2, 3))
    broker.create_topic("orders", partitions=6, replication_factor=1)
    expected = placed_here(broker, "orders")
    assert 0 < len(expected) < 6  # the other partitions are placed on brokers 2 and 3
    assert set(broker.context.partitions) == expected
    assert set(broker.loop.groups) == expected | {"meta"}
    for group_id in expected:
        assert broker.context.partitions[group_id].group is broker.loop.groups[group_id]


def test_a_metadata_change_is_reconciled_by_the_loop_task_without_being_asked():
    broker = ServiceBroker(brokers=(1,))
    broker.run_tasks()
    broker.admin.create_topic("orders", partitions=2, replication_factor=1)  # applied: the next round reconciles
    assert broker.context.partitions == {}
    broker.run_tasks()
    assert broker.context.partitions == {}  # the reconcile task is due every 50 ms
    broker.clock.advance(50)
    assert "reconcile replicas" in broker.run_tasks()
    assert set(broker.context.partitions) == placed_here(broker, "orders")


def test_it_drops_what_the_metadata_no_longer_places_here():
    broker = ServiceBroker(brokers=(1,))
    broker.create_topic("orders", partitions=2, replication_factor=1)
    broker.create_topic("jobs", partitions=1, replication_factor=1, kind="queue")
    orders = placed_here(broker, "orders")
    replicas = [broker.context.partitions[g] for g in orders]
    broker.context.leaders.apply_gossip(2, [(g, 1, [2]) for g in orders], [], full=True)
    woken = []
    for replica in replicas:
        replica.appended = _Recording(woken, replica.group_id)

    broker.admin.delete_topic("orders")
    broker.reconcile()

    assert set(broker.context.partitions) == placed_here(broker, "jobs") | placed_here(broker, "jobs.dlq")
    assert not orders & set(broker.loop.groups)
    assert sorted(broker.files.deleted) == sorted(orders)
    assert sorted(woken) == sorted(orders)
    assert all(broker.context.leaders.get(g) is None for g in orders)


class _Recording:
    """A replica's `appended` condition that records being notified."""

    def __init__(self, woken, group_id):
        self.woken, self.group_id = woken, group_id

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def notify_all(self):
        self.woken.append(self.group_id)


def test_a_placement_removed_while_its_replica_opens_is_closed_and_deleted():
    opener = OpenWhenTold()
    broker = ServiceBroker(brokers=(1,), opener=opener)
    broker.admin.create_topic("orders", partitions=1, replication_factor=1)
    broker.reconcile()
    (group_id,) = broker.replicas.opening
    broker.admin.delete_topic("orders")
    broker.reconcile()  # still opening: nothing hosted to drop, nothing opened twice
    assert broker.replicas.opening == {group_id} and len(opener.pending) == 1

    opened = []
    open_replica = broker.files.open
    broker.files.open = lambda *args: opened.append(open_replica(*args)) or opened[-1]
    opener.run()

    assert broker.context.partitions == {} and group_id not in broker.loop.groups
    assert broker.replicas.opening == set()
    assert broker.files.deleted == [group_id]
    (_sm, store, _group), = opened
    with pytest.raises(errors.Unavailable, match="closed"):
        store.size_bytes()


def test_a_replica_that_fails_to_open_is_stopped_and_the_others_open():
    broker = ServiceBroker(brokers=(1,))
    open_replica = broker.files.open
    failing = []

    def open_or_fail(group_id, topic, placement):
        if topic.name == "orders" and placement.partition == 0:
            failing.append(group_id)
            raise OSError("journal damaged")
        return open_replica(group_id, topic, placement)

    broker.files.open = open_or_fail
    broker.create_topic("orders", partitions=3, replication_factor=1)
    (bad,) = failing
    assert set(broker.context.partitions) == placed_here(broker, "orders") - {bad}
    assert broker.faults.is_stopped(bad)
    broker.admin.create_topic("more", partitions=1, replication_factor=1)
    broker.reconcile()  # a stopped replica is not opened again by every reconcile
    assert failing == [bad] and broker.faults.is_stopped(bad)


def test_a_replica_opened_once_the_broker_stops_is_closed_and_kept():
    opener = OpenWhenTold()
    broker = ServiceBroker(brokers=(1,), opener=opener)
    broker.admin.create_topic("orders", partitions=1, replication_factor=1)
    broker.reconcile()
    broker.stopping.set()
    opener.run()
    assert broker.context.partitions == {} and broker.files.deleted == []


def test_groups_follow_the_first_replica_of_their_placement():
    broker = ServiceBroker(brokers=(1,))
    broker.create_topic("orders", partitions=1, replication_factor=1)
    (replica,) = broker.context.partitions.values()
    replica.group.preferred_leader = 9
    broker.replicas.reconcile()
    assert replica.group.preferred_leader == 1
