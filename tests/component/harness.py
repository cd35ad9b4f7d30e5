"""A broker's services over in-process replication and a manual clock: no Raft, no gRPC, no processes.

`ServiceBroker` wires what `broker/server.py` wires (metadata group, partition replicas placed here, the
services) but every group is an `InProcessGroup` over a `MemoryStore`, applying commands at once.
"""
from __future__ import annotations

from raftbus.broker import commands
from raftbus.broker.clock import ManualClock
from raftbus.broker.raft.inprocess import InProcessGroup
from raftbus.broker.metadata.service import AdminService
from raftbus.broker.context import METADATA_GROUP, BrokerContext, PartitionReplica, replica_plan
from raftbus.broker.log.service import LogService
from raftbus.broker.settings import BrokerSettings
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.log.state import PartitionStateMachine
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client.records import encode_batch

PRODUCER = b"p" * 16


class ServiceBroker:
    """Broker `node_id` of a cluster whose other brokers exist only in the metadata."""

    def __init__(self, node_id: int = 1, brokers=(1, 2, 3), **settings):
        self.clock = ManualClock()
        self.settings = BrokerSettings(node_id=node_id, **settings)
        self.metadata_sm = MetadataStateMachine(MemoryStore(MetadataStateMachine.TABLES))
        self.metadata_group = InProcessGroup(METADATA_GROUP, self.metadata_sm, self_id=node_id)
        self.context = BrokerContext(node_id=node_id, settings=self.settings, clock=self.clock,
                                     metadata_sm=self.metadata_sm, metadata_group=self.metadata_group)
        self.admin = AdminService(self.context)
        self.log = LogService(self.context)
        for broker_id in brokers:
            self.admin.register_broker(broker_id, f"127.0.0.1:{9000 + broker_id}", f"127.0.0.1:{9100 + broker_id}")

    def reconcile(self) -> None:
        """Open the replicas the metadata places here (leader here) and drop the others, as the server does."""
        create, drop = replica_plan(self.metadata_sm.topics().values(), self.context.node_id,
                                    set(self.context.partitions))
        for group_id in drop:
            self.context.partitions.pop(group_id)
        for group_id, (topic, placement) in create.items():
            store = MemoryStore(PartitionStateMachine.TABLES)
            sm = PartitionStateMachine(store)
            group = InProcessGroup(group_id, sm, store, self_id=self.context.node_id)
            replica = PartitionReplica(topic.name, topic.topic_id, placement.partition, group, sm, store)
            group.listeners.append(lambda _group, r=replica: r.notify_appended())
            self.context.partitions[group_id] = replica

    def create_topic(self, name: str = "orders", **options):
        view = self.admin.create_topic(name, **options)
        self.reconcile()
        return view

    def replica(self, topic: str, partition: int) -> PartitionReplica:
        return self.context.leader_replica(topic, partition)

    def produce(self, topic: str, partition: int, values, *, sequence: int = 0, producer: bytes = PRODUCER,
                timestamp_ms: int | None = None):
        ts = self.clock.now_ms() if timestamp_ms is None else timestamp_ms
        blob, count, max_ts = encode_batch([(ts, None, v, ()) for v in values])
        return self.log.produce(topic, partition, producer_id=producer, base_sequence=sequence, record_count=count,
                                max_timestamp_ms=max_ts, records=blob)


def raw_produce(now_ms: int, values) -> bytes:
    blob, count, max_ts = encode_batch([(now_ms, None, v, ()) for v in values])
    return commands.encode_produce(now_ms, PRODUCER, 0, count, max_ts, blob)
