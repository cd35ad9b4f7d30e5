"""Component tests: topic administration through the admin service, over in-process replication."""
from __future__ import annotations

import pytest

from raftbus.client import errors
from tests.component.harness import ServiceBroker


@pytest.fixture
def broker():
    return ServiceBroker()


def test_create_describe_list_and_delete_a_topic(broker):
    """Goal: a created topic is described with its placement and offsets, listed, and gone once deleted."""
    view = broker.create_topic("orders", partitions=3, replication_factor=2, retention_ms=1_000)
    assert [p.partition for p in view.partitions] == [0, 1, 2]
    assert all(len(p.replicas) == 2 for p in view.partitions)
    assert view.topic.retention_ms == 1_000 and view.topic.kind == "stream"
    assert [t.topic.name for t in broker.admin.list_topics()] == ["orders"]
    hosted = [p for p in broker.admin.describe_topic("orders").partitions if 1 in p.replicas]
    assert hosted and all(p.high_watermark == 0 and p.leader_id == 1 for p in hosted)
    broker.admin.delete_topic("orders")
    broker.reconcile()
    with pytest.raises(errors.UnknownTopic):
        broker.admin.describe_topic("orders")
    assert broker.context.partitions == {}


def test_partitions_can_grow_but_not_shrink(broker):
    """Goal: alter_partitions adds partitions with placements and refuses a shrink or a no-op."""
    broker.create_topic("orders", partitions=2)
    grown = broker.admin.alter_partitions("orders", 5)
    assert [p.partition for p in grown.partitions] == [0, 1, 2, 3, 4]
    for count in (5, 3):
        with pytest.raises(errors.InvalidPartitions):
            broker.admin.alter_partitions("orders", count)


@pytest.mark.parametrize("options, error", [
    ({"name": "bad name"}, errors.InvalidName),
    ({"name": ""}, errors.InvalidName),
    ({"name": "x" * 250}, errors.InvalidName),
    ({"replication_factor": 4}, errors.InvalidReplicationFactor),
    ({"partitions": -1}, errors.InvalidPartitions),
    ({"partitions": 10_001}, errors.InvalidPartitions),
    ({"kind": "table"}, errors.InvalidArgument),
    ({"kind": "queue", "ordering": "random"}, errors.InvalidArgument),
    ({"ordering": "fair"}, errors.InvalidArgument),
    ({"retention_ms": -5}, errors.InvalidArgument),
])
def test_bad_topic_requests_are_refused_and_create_nothing(broker, options, error):
    """Goal: every bad create_topic argument has its typed error and leaves no topic behind."""
    with pytest.raises(error):
        broker.admin.create_topic(**{"name": "orders", **options})
    assert broker.admin.list_topics() == []


def test_an_existing_topic_cannot_be_created_again(broker):
    """Goal: creating a topic twice answers TOPIC_EXISTS and keeps the first one's settings."""
    broker.create_topic("orders", partitions=2)
    with pytest.raises(errors.TopicExists):
        broker.admin.create_topic("orders", partitions=5)
    assert len(broker.admin.describe_topic("orders").partitions) == 2


def test_only_the_controller_changes_topics(broker):
    """Goal: a broker that does not lead the metadata group refuses admin writes with the controller as hint."""
    broker.metadata_group.set_leader(3)
    with pytest.raises(errors.NotLeader) as caught:
        broker.admin.create_topic("orders")
    assert (caught.value.leader_id, caught.value.leader_address) == (3, "127.0.0.1:9003")


def test_cluster_view_lists_brokers_and_the_controller(broker):
    """Goal: the cluster view names every registered broker, which are alive, and the controller."""
    view = broker.admin.cluster()
    assert [b.broker_id for b, _ in view.brokers] == [1, 2, 3]
    assert [alive for _, alive in view.brokers] == [True, False, False]
    assert view.controller_id == 1


def test_broker_stats_report_this_broker():
    """Goal: broker_stats answers for the broker asked, with whatever the process reports about itself."""
    broker = ServiceBroker(process_stats=lambda: {"rss_bytes": 123, "groups_hosted": 4})
    stats = broker.admin.broker_stats()
    assert {k: v for k, v in stats.items() if not k.startswith("compaction_")} == \
        {"broker_id": 1, "rss_bytes": 123, "groups_hosted": 4}
    assert stats["compaction_passes"] == 0 and stats["compaction_bytes_removed"] == 0


@pytest.mark.parametrize("options, error", [
    ({"partitions": 0}, errors.InvalidPartitions),
    ({"replication_factor": 0}, errors.InvalidReplicationFactor),
])
def test_explicit_zero_is_an_error_not_the_default(broker, options, error):
    """Goal: an explicit 0 partitions or replication factor is refused; only an absent value takes the default."""
    with pytest.raises(error):
        broker.create_topic("orders", **options)
    assert broker.admin.list_topics() == []
