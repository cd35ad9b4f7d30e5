"""One broker's services over in-process replication, in-memory stores and a manual clock (component tests)."""
from __future__ import annotations

import dataclasses

from raftbus.broker.clock import ManualClock
from raftbus.broker.raft.inprocess import InProcessGroup
from raftbus.broker.metadata.service import AdminService
from raftbus.broker.context import METADATA_GROUP, BrokerContext, PartitionReplica, replica_plan
from raftbus.broker.groups.service import GroupService
from raftbus.broker.log.service import LogService
from raftbus.broker.groups.offset_service import OffsetService
from raftbus.broker.settings import BrokerSettings
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.log.state import PartitionStateMachine
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client.records import encode_batch


class RecordingGroup(InProcessGroup):
    """An in-process group that also keeps every submitted command (to feed a lagging replica)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log: list[bytes] = []

    def submit(self, command: bytes):
        self.log.append(command)
        return super().submit(command)


class Broker:
    """Metadata and every partition replica in one process; this broker leads all of them."""

    def __init__(self, clock: ManualClock | None = None, **settings):
        self.clock = clock or ManualClock()
        self.settings = dataclasses.replace(BrokerSettings(), **settings)
        self.metadata_sm = MetadataStateMachine(MemoryStore(MetadataStateMachine.TABLES))
        self.metadata_group = RecordingGroup(METADATA_GROUP, self.metadata_sm)
        self.context = BrokerContext(node_id=1, settings=self.settings, clock=self.clock, metadata_sm=self.metadata_sm,
                                     metadata_group=self.metadata_group)
        self.admin = AdminService(self.context)
        self.log = LogService(self.context)
        self.groups = GroupService(self.context)
        self.offsets = OffsetService(self.context)
        self.metadata_group.listeners.append(self.groups.on_metadata_event)
        self.admin.register_broker(1, "127.0.0.1:1", "127.0.0.1:2")

    def create_topic(self, name: str, partitions: int = 4, kind: str = "stream") -> None:
        self.admin.create_topic(name, partitions=partitions, replication_factor=1, kind=kind)
        self.reconcile()

    def alter_partitions(self, name: str, partitions: int) -> None:
        self.admin.alter_partitions(name, partitions)
        self.reconcile()

    def reconcile(self) -> None:
        create, drop = replica_plan(self.metadata_sm.topics().values(), 1, set(self.context.partitions))
        for group_id in drop:
            self.context.partitions.pop(group_id)
        for group_id, (topic, placement) in create.items():
            sm = PartitionStateMachine(MemoryStore(PartitionStateMachine.TABLES))
            group = InProcessGroup(group_id, sm)
            self.context.partitions[group_id] = PartitionReplica(topic.name, topic.topic_id, placement.partition,
                                                                 group, sm, None)

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
        self.context = BrokerContext(node_id=2, settings=leader.settings, clock=leader.clock,
                                     metadata_sm=self.metadata_sm, metadata_group=group)
        self.context.partitions = leader.context.partitions
        self.offsets = OffsetService(self.context)
        self.log = LogService(self.context)
