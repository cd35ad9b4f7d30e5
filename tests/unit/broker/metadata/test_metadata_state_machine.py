"""Goal: the metadata state machine registers brokers and creates, grows and deletes topics with spread placement."""
import pytest

from raftbus.broker import commands, model
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors


class Metadata:
    def __init__(self, store):
        self.store = store
        self.sm = MetadataStateMachine(store)
        self.index = self.sm.applied_index()

    def apply(self, command):
        self.index += 1
        return self.sm.apply(self.index, command)

    def register(self, *broker_ids):
        for broker_id in broker_ids:
            self.apply(commands.encode_register_broker(broker_id=broker_id, address=f"h:{7000 + broker_id}",
                                                       raft_address=f"h:{8000 + broker_id}", now_ms=5))

    def create(self, name="orders", partitions=3, replication_factor=3, kind="stream", ordering=""):
        return self.apply(commands.encode_create_topic(
            name=name, kind=kind, ordering=ordering, partitions=partitions, replication_factor=replication_factor,
            retention_ms=1_000, retention_bytes=-1, now_ms=10))

    def delete(self, name="orders"):
        return self.apply(commands.encode_delete_topic(name=name, now_ms=20))

    def alter(self, partitions, name="orders"):
        return self.apply(commands.encode_alter_partitions(name=name, partitions=partitions, now_ms=30))


@pytest.fixture
def meta():
    metadata = Metadata(MemoryStore(MetadataStateMachine.TABLES))
    metadata.register(1, 2, 3)
    return metadata


def test_register_broker_inserts_and_updates(meta):
    assert sorted(meta.sm.brokers()) == [1, 2, 3]
    assert meta.sm.brokers()[2] == model.Broker(2, "h:7002", "h:8002", 5)
    version = meta.sm.version
    meta.register(2)
    assert meta.sm.version == version
    meta.apply(commands.encode_register_broker(broker_id=2, address="new:1", raft_address="h:8002", now_ms=9))
    assert meta.sm.brokers()[2].address == "new:1" and meta.sm.version > version


def test_create_topic_places_leaders_on_every_broker(meta):
    topic = meta.create(partitions=3, replication_factor=3)
    assert isinstance(topic, model.Topic) and meta.sm.topic("orders") == topic
    assert (topic.topic_id, topic.kind, topic.retention_ms, topic.created_ms) == (1, "stream", 1_000, 10)
    leaders = [p.replicas[0] for p in topic.partitions]
    assert sorted(leaders) == [1, 2, 3]
    assert all(sorted(p.replicas) == [1, 2, 3] for p in topic.partitions)


@pytest.mark.parametrize("kwargs, error", [
    ({"replication_factor": 4}, errors.InvalidReplicationFactor),
    ({"replication_factor": 0}, errors.InvalidReplicationFactor),
    ({"partitions": 0}, errors.InvalidPartitions),
    ({"name": "bad name"}, errors.InvalidName),
    ({"name": ".."}, errors.InvalidName),
    ({"kind": "table"}, errors.InvalidArgument),
])
def test_create_topic_refusals_change_nothing(meta, kwargs, error):
    version = meta.sm.version
    assert isinstance(meta.create(**kwargs), error)
    assert dict(meta.sm.topics()) == {} and meta.sm.version == version
    assert meta.sm.applied_index() == meta.index


def test_topic_exists(meta):
    meta.create()
    assert isinstance(meta.create(partitions=5), errors.TopicExists)
    assert len(meta.sm.topic("orders").partitions) == 3


def test_delete_then_recreate_never_reuses_the_id(meta):
    first = meta.create()
    assert meta.delete() is None
    assert meta.sm.topic("orders") is None
    assert isinstance(meta.delete(), errors.UnknownTopic)
    second = meta.create()
    assert second.topic_id == first.topic_id + 1


def test_alter_partitions_grows_only(meta):
    original = meta.create(partitions=2, replication_factor=2)
    grown = meta.alter(5)
    assert [p.partition for p in grown.partitions] == [0, 1, 2, 3, 4]
    assert grown.partitions[:2] == original.partitions and grown.topic_id == original.topic_id
    assert all(len(p.replicas) == 2 for p in grown.partitions)
    assert grown.partitions[2:] == model.place_partitions(grown.topic_id, 2, 3, 2, [1, 2, 3])
    assert isinstance(meta.alter(5), errors.InvalidPartitions)
    assert isinstance(meta.alter(4), errors.InvalidPartitions)
    assert isinstance(meta.alter(9, name="nope"), errors.UnknownTopic)
    assert len(meta.sm.topic("orders").partitions) == 5


def test_replay_is_ignored(meta):
    meta.create()
    command = commands.encode_create_topic(name="late", kind="stream", ordering="", partitions=1,
                                           replication_factor=1, retention_ms=-1, retention_bytes=-1, now_ms=1)
    assert meta.sm.apply(meta.index, command) is None
    assert meta.sm.apply(1, command) is None
    assert meta.sm.topic("late") is None


def test_malformed_command_is_an_error_value(meta):
    for bad in (b"Jnot json", b'J{"type":"create_topic"}', b"", commands.encode_trim(1, 1, 1, 1)):
        assert isinstance(meta.apply(bad), errors.InvalidArgument)
    assert meta.sm.applied_index() == meta.index


def test_state_survives_reopen_and_reload(tmp_path):
    store = LmdbStore(str(tmp_path / "meta"), MetadataStateMachine.TABLES, 1 << 20)
    first = Metadata(store)
    first.register(1, 2)
    topic = first.create(partitions=4, replication_factor=2)
    store.close()
    store = LmdbStore(str(tmp_path / "meta"), MetadataStateMachine.TABLES, 1 << 20)
    try:
        again = Metadata(store)
        assert again.sm.topic("orders") == topic and sorted(again.sm.brokers()) == [1, 2]
        assert again.sm.applied_index() == first.index and again.sm.version == first.sm.version
        assert again.create(name="next", replication_factor=2).topic_id == topic.topic_id + 1
    finally:
        store.close()


def test_reads_are_immutable_snapshots(meta):
    topics = meta.sm.topics()
    meta.create()
    assert "orders" not in topics and "orders" in meta.sm.topics()
    with pytest.raises(TypeError):
        meta.sm.topics()["x"] = None


@pytest.mark.parametrize("name, ok", [("a", True), ("A.b_c-9", True), ("x" * 249, True), ("x" * 250, False),
                                      ("", False), (".", False), ("..", False), ("a/b", False), ("é", False)])
def test_topic_name_rules(name, ok):
    if ok:
        model.validate_topic_name(name)
    else:
        with pytest.raises(errors.InvalidName):
            model.validate_topic_name(name)


def test_placement_is_deterministic_and_rotates():
    placements = model.place_partitions(topic_id=4, first_partition=0, count=4, replication_factor=2,
                                        broker_ids=[30, 10, 20])
    assert [p.replicas for p in placements] == [(20, 30), (30, 10), (10, 20), (20, 30)]
    topic = model.Topic("t", 4, "stream", "", -1, -1, 0, placements)
    assert model.Topic.from_dict(topic.to_dict()) == topic


def test_register_broker_records_its_metrics_url(meta):
    """Goal: a broker's metrics_url is stored with it, a change is a new registration, and none stays ""."""
    assert meta.sm.brokers()[1].metrics_url == ""
    meta.apply(commands.encode_register_broker(broker_id=1, address="h:7001", raft_address="h:8001", now_ms=9,
                                               metrics_url="http://h:9001/metrics"))
    assert meta.sm.brokers()[1].metrics_url == "http://h:9001/metrics"
    version = meta.sm.version
    meta.apply(commands.encode_register_broker(broker_id=1, address="h:7001", raft_address="h:8001", now_ms=10,
                                               metrics_url="http://h:9001/metrics"))
    assert meta.sm.version == version
    assert model.Broker.from_dict(meta.sm.brokers()[1].to_dict()) == meta.sm.brokers()[1]
    assert model.Broker.from_dict({"broker_id": 4, "address": "a:1", "raft_address": "a:2",
                                   "registered_ms": 1}).metrics_url == ""
