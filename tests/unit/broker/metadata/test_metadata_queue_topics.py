"""Goal: creating a queue topic creates its dead-letter topic in the same command, deleting it deletes both, and
bad queue options or a clashing dead-letter name are refused without change."""
import pytest

from raftbus.broker import commands, model
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors

QUEUE = {"max_deliveries": 5, "backoff_base_ms": 1000, "backoff_max_ms": 60_000, "max_in_flight_per_group": 2,
         "idempotency_window_ms": 86_400_000}


class Metadata:
    def __init__(self, store):
        self.store = store
        self.sm = MetadataStateMachine(store)
        self.index = self.sm.applied_index()
        for broker_id in (1, 2, 3):
            self.apply(commands.encode_register_broker(broker_id=broker_id, address=f"h:{broker_id}",
                                                       raft_address=f"r:{broker_id}", now_ms=1))

    def apply(self, command):
        self.index += 1
        return self.sm.apply(self.index, command)

    def create(self, name="jobs", kind="queue", ordering="fair", queue=QUEUE, partitions=2):
        return self.apply(commands.encode_create_topic(
            name=name, kind=kind, ordering=ordering, partitions=partitions, replication_factor=3, retention_ms=-1,
            retention_bytes=-1, now_ms=10, queue=queue))

    def delete(self, name):
        return self.apply(commands.encode_delete_topic(name=name, now_ms=20))


@pytest.fixture(params=["memory", "lmdb"])
def meta(request, tmp_path):
    if request.param == "memory":
        return Metadata(MemoryStore(MetadataStateMachine.TABLES))
    return Metadata(LmdbStore(str(tmp_path / "meta"), MetadataStateMachine.TABLES, 1 << 20))


def test_queue_topic_comes_with_its_dead_letter_topic(meta):
    source = meta.create()
    dlq = meta.sm.topic("jobs.dlq")
    assert source.queue == model.QueueConfig(**QUEUE, dead_letter_topic="jobs.dlq")
    assert (dlq.kind, dlq.ordering, len(dlq.partitions), dlq.topic_id) == ("queue", "priority", 2, source.topic_id + 1)
    assert dlq.queue.dead_letter_of == "jobs" and dlq.queue.max_deliveries == 0 and dlq.queue.dead_letter_topic == ""
    reopened = MetadataStateMachine(meta.store)
    assert reopened.topic("jobs") == source and reopened.topic("jobs.dlq") == dlq
    nxt = meta.create(name="other", kind="stream", ordering="", queue=None)
    assert nxt.topic_id == dlq.topic_id + 1 and nxt.queue is None


def test_deleting_the_source_deletes_its_dead_letter_topic(meta):
    meta.create()
    assert meta.delete("jobs") is None
    assert meta.sm.topic("jobs") is None and meta.sm.topic("jobs.dlq") is None
    assert sorted(MetadataStateMachine(meta.store).topics()) == []


def test_a_dead_letter_topic_cannot_be_deleted_alone(meta):
    meta.create()
    version = meta.sm.version
    assert isinstance(meta.delete("jobs.dlq"), errors.InvalidArgument)
    assert meta.sm.topic("jobs.dlq") is not None and meta.sm.version == version


@pytest.mark.parametrize("queue, ordering, error", [
    (None, "fair", errors.InvalidArgument),
    ({**QUEUE, "max_deliveries": -1}, "fair", errors.InvalidArgument),
    ({**QUEUE, "backoff_max_ms": 10}, "fair", errors.InvalidArgument),
    ({"max_deliveries": 5}, "fair", errors.InvalidArgument),
    (QUEUE, "lifo", errors.InvalidArgument),
])
def test_bad_queue_options_are_refused_without_change(meta, queue, ordering, error):
    before = dict(meta.sm.topics())
    assert isinstance(meta.create(queue=queue, ordering=ordering), error)
    assert dict(meta.sm.topics()) == before


def test_an_existing_dead_letter_name_refuses_the_queue_topic(meta):
    meta.create(name="jobs.dlq", kind="stream", ordering="", queue=None)
    assert isinstance(meta.create(), errors.TopicExists)
    assert meta.sm.topic("jobs") is None
