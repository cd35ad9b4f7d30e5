"""Goal: alter_topic changes a topic's retention and a queue topic's options in the metadata, refuses what does not
apply (queue options on a stream topic or on a dead-letter topic, an inconsistent backoff, nothing to change) with
typed errors and no change, and leaves partitions and placement as they were."""
import pytest

from raftbus.broker import commands, model
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors
from tests.unit.broker.metadata.test_metadata_queue_topics import QUEUE
from tests.unit.broker.metadata.test_metadata_state_machine import Metadata


@pytest.fixture
def meta():
    metadata = Metadata(MemoryStore(MetadataStateMachine.TABLES))
    metadata.register(1, 2, 3)
    metadata.create("orders", partitions=2)
    metadata.apply(commands.encode_create_topic(name="jobs", kind="queue", ordering="priority", partitions=2,
                                                replication_factor=3, retention_ms=-1, retention_bytes=-1, now_ms=10,
                                                queue=QUEUE))
    return metadata


def alter(meta, name, **changes):
    return meta.apply(commands.encode_alter_topic(name=name, changes=changes, now_ms=40))


def test_retention_changes_and_placement_stays(meta):
    before = meta.sm.topic("orders")
    altered = alter(meta, "orders", retention_ms=-1, retention_bytes=1 << 30)
    assert isinstance(altered, model.Topic) and (altered.retention_ms, altered.retention_bytes) == (-1, 1 << 30)
    assert meta.sm.topic("orders").partitions == before.partitions


def test_queue_options_change_and_keep_the_dead_letter_link(meta):
    altered = alter(meta, "jobs", max_deliveries=9, backoff_base_ms=50, backoff_max_ms=100)
    queue = meta.sm.topic("jobs").queue
    assert (queue.max_deliveries, queue.backoff_base_ms, queue.backoff_max_ms) == (9, 50, 100)
    assert queue.dead_letter_topic == "jobs.dlq" and altered.queue == queue


@pytest.mark.parametrize("name, changes, error", [
    ("orders", {"max_deliveries": 3}, errors.WrongTopicKind),
    ("jobs.dlq", {"max_deliveries": 3}, errors.InvalidArgument),
    ("jobs", {"backoff_base_ms": 10_000, "backoff_max_ms": 5}, errors.InvalidArgument),
    ("jobs", {"retention_ms": -5}, errors.InvalidArgument),
    ("jobs", {"partitions": 9}, errors.InvalidArgument),
    ("jobs", {}, errors.InvalidArgument),
    ("missing", {"retention_ms": 5}, errors.UnknownTopic),
])
def test_what_does_not_apply_is_refused_and_changes_nothing(meta, name, changes, error):
    before = dict(meta.sm.topics())
    assert isinstance(alter(meta, name, **changes), error)
    assert dict(meta.sm.topics()) == before
