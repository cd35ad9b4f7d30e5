"""One broker as the server assembles it, with a metadata group that keeps its log (component tests of groups and
offsets): `lagging_copy` is another broker's view with an older metadata replica."""
from __future__ import annotations

from pathlib import Path

from raftbus.broker.clock import ManualClock
from raftbus.broker.context import METADATA_GROUP, BrokerContext
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.raft.inprocess import InProcessGroup
from raftbus.broker.assembly import build_features
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client.records import encode_batch
from tests.component.harness import InProcessBroker, MetadataGroup


class RecordingGroup(MetadataGroup):
    """An in-process group that also keeps every submitted command (to feed a lagging replica)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log: list[bytes] = []

    def submit(self, command: bytes):
        self.log.append(command)
        return super().submit(command)


class Broker(InProcessBroker):
    """Metadata and every partition replica in one process; this broker leads all of them."""

    def __init__(self, clock: ManualClock | None = None, **settings):
        super().__init__(1, clock=clock, metadata_group_type=RecordingGroup, **settings)
        self.admin.register_broker(1, "127.0.0.1:1", "127.0.0.1:2")

    def create_topic(self, name: str, partitions: int = 4, kind: str = "stream") -> None:
        self.admin.create_topic(name, partitions=partitions, replication_factor=1, kind=kind)
        self.reconcile()

    def alter_partitions(self, name: str, partitions: int) -> None:
        self.admin.alter_partitions(name, partitions)
        self.reconcile()

    def produce(self, topic: str, partition: int, count: int) -> int:
        blob, record_count, max_ts = encode_batch([(self.clock.now_ms(), None, b"v", ())] * count)
        result = self.log.produce(topic, partition, producer_id=b"", base_sequence=0, record_count=record_count,
                                  max_timestamp_ms=max_ts, records=blob)
        return result.base_offset

    def lagging_copy(self, applied_commands: int) -> "LaggingReplica":
        """Another broker's metadata replica that applied only the first `applied_commands` metadata commands."""
        return LaggingReplica(self, self.metadata_group.log[:applied_commands])


class LaggingReplica:
    """A second broker sharing the partition replicas but with an older metadata replica."""

    def __init__(self, leader: Broker, applied: list[bytes]):
        self.metadata_sm = MetadataStateMachine(MemoryStore(MetadataStateMachine.TABLES))
        for index, command in enumerate(applied, start=1):
            self.metadata_sm.apply(index, command)
        group = InProcessGroup(METADATA_GROUP, self.metadata_sm, self_id=2)
        group.set_leader(1)
        settings = leader.settings.replace(node_id=2)
        self.context = BrokerContext(node_id=2, clock=leader.clock, metadata_sm=self.metadata_sm, metadata_group=group,
                                     commit_timeout_ms=settings.log.produce_timeout_ms)
        self.context.partitions = leader.context.partitions
        features = build_features(self.context, settings, data_dir=Path(settings.node.data_dir))
        self.offsets = features.groups.offsets
        self.log = features.log.service
