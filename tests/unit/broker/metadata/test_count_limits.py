"""Goal: the metadata state machine refuses, with LIMIT_REACHED and no change, a topic creation or growth that
would exceed the count limits its command carries (topics, partitions, replicas per broker); a queue topic's
dead-letter topic counts too; a command without limits (written before they existed) is not limited."""
import pytest

from raftbus.broker import commands, model
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors
from tests.unit.broker.metadata.test_metadata_queue_topics import QUEUE
from tests.unit.broker.metadata.test_metadata_state_machine import Metadata


def limits(topics_max=100, cluster_partitions_max=1_000, broker_replicas_max=1_000) -> dict:
    return model.CountLimits(topics_max, cluster_partitions_max, broker_replicas_max).to_command()


@pytest.fixture
def meta():
    metadata = Metadata(MemoryStore(MetadataStateMachine.TABLES))
    metadata.register(1, 2, 3)
    return metadata


def create(meta, name, partitions, replication_factor=3, kind="stream", **limit):
    return meta.apply(commands.encode_create_topic(
        name=name, kind=kind, ordering="priority" if kind == "queue" else "", partitions=partitions,
        replication_factor=replication_factor, retention_ms=-1, retention_bytes=-1, now_ms=10,
        queue=QUEUE if kind == "queue" else None, limits=limits(**limit)))


def test_topics_max_counts_every_topic_and_a_queue_topics_dead_letter_topic(meta):
    assert isinstance(create(meta, "a", 1, topics_max=2), model.Topic)
    refused = create(meta, "jobs", 1, kind="queue", topics_max=2)  # jobs + jobs.dlq would make 3
    assert isinstance(refused, errors.LimitReached) and "topics_max=2" in refused.message
    assert sorted(meta.sm.topics()) == ["a"]


def test_cluster_partitions_max_holds_for_creation_and_growth(meta):
    create(meta, "a", 4, cluster_partitions_max=6)
    refused = create(meta, "b", 3, cluster_partitions_max=6)
    assert isinstance(refused, errors.LimitReached) and "cluster_partitions_max=6" in refused.message
    grown = meta.apply(commands.encode_alter_partitions(name="a", partitions=7, now_ms=30,
                                                        limits=limits(cluster_partitions_max=6)))
    assert isinstance(grown, errors.LimitReached)
    assert len(meta.sm.topic("a").partitions) == 4 and "b" not in meta.sm.topics()


def test_broker_replicas_max_counts_replicas_on_the_busiest_broker(meta):
    assert isinstance(create(meta, "a", 3, replication_factor=3, broker_replicas_max=3), model.Topic)
    refused = create(meta, "b", 1, replication_factor=1, broker_replicas_max=3)
    assert isinstance(refused, errors.LimitReached) and "broker_replicas_max=3" in refused.message


def test_malformed_limits_are_an_invalid_command(meta):
    command = commands.encode_create_topic(name="a", kind="stream", ordering="", partitions=1, replication_factor=1,
                                           retention_ms=-1, retention_bytes=-1, now_ms=10,
                                           limits={"topics_max": "many"})
    assert isinstance(meta.apply(command), errors.InvalidArgument)
    assert meta.sm.topics() == {}


def test_commands_without_limits_are_not_limited(meta):
    assert isinstance(meta.create(name="old", partitions=50), model.Topic)
