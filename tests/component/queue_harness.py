"""One broker's queue services over in-process replication, memory stores and a manual clock."""
from __future__ import annotations

from raftbus.broker.clock import ManualClock
from raftbus.broker.raft.inprocess import InProcessGroup
from raftbus.broker.metadata.service import AdminService
from raftbus.broker.context import METADATA_GROUP, BrokerContext, PartitionReplica, partition_group_id, replica_plan
from raftbus.broker.queues.dead_letters import DeadLetters
from raftbus.broker.queues.model import NewMessage
from raftbus.broker.queues.service import QueueService
from raftbus.broker.settings import BrokerSettings
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.log.state import PartitionStateMachine
from raftbus.broker.queues.state.machine import QueueStateMachine
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client.records import encode_batch


def record(value: bytes, key: bytes | None = None, timestamp_ms: int = 5) -> bytes:
    """One record of client/records.py, as the SDK sends it."""
    return encode_batch([(timestamp_ms, key, value, ())])[0]


def message(value: bytes, **fields) -> NewMessage:
    return NewMessage(record=record(value), **fields)


class QueueBroker:
    """Admin, queue and dead-letter services of broker 1, every replica local and led here."""

    def __init__(self, **settings):
        self.settings = BrokerSettings(**{"default_replication_factor": 1, **settings})
        self.clock = ManualClock(1_000_000)
        metadata_sm = MetadataStateMachine(MemoryStore(MetadataStateMachine.TABLES))
        self.context = BrokerContext(node_id=1, settings=self.settings, clock=self.clock, metadata_sm=metadata_sm,
                                     metadata_group=InProcessGroup(METADATA_GROUP, metadata_sm))
        self.admin = AdminService(self.context)
        self.admin.register_broker(1, "127.0.0.1:1", "127.0.0.1:2")
        self.queues = QueueService(self.context)
        self.forwarded: list[tuple[str, int, int]] = []
        self.dead_letters = DeadLetters(self.context, self.queues, self.forward)

    def forward(self, topic: str, partition: int, messages: list[NewMessage]):
        self.forwarded.append((topic, partition, len(messages)))
        return self.queues.enqueue_moved(topic, partition, messages)[1]

    def create(self, name: str, partitions: int = 1, kind: str = "queue", ordering: str = "", **options):
        view = self.admin.create_topic(name, partitions=partitions, replication_factor=1, kind=kind,
                                       ordering=ordering, **options)
        self.reconcile()
        return view.topic

    def reconcile(self) -> None:
        create, _ = replica_plan(self.context.metadata_sm.topics().values(), 1, set(self.context.partitions))
        for group_id, (topic, placement) in create.items():
            if topic.kind == "queue":
                store = MemoryStore(QueueStateMachine.TABLES)
                sm = QueueStateMachine(store, topic.ordering)
            else:
                store = MemoryStore(PartitionStateMachine.TABLES)
                sm = PartitionStateMachine(store)
            group = InProcessGroup(group_id, sm, store)
            replica = PartitionReplica(topic.name, topic.topic_id, placement.partition, group, sm, store)
            group.listeners.append(lambda _group, r=replica: r.notify_appended())
            self.context.partitions[group_id] = replica

    def replica(self, topic: str, partition: int = 0) -> PartitionReplica:
        """The local replica of a partition, led or not."""
        return self.context.partitions[partition_group_id(self.context.topic(topic).topic_id, partition)]

    def put(self, topic: str, *values: bytes, partition: int = 0, **fields) -> list[int]:
        _, results = self.queues.enqueue(topic, partition, [message(v, **fields) for v in values])
        return [mid for mid, _ in results]
