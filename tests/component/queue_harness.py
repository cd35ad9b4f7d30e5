"""One broker's queue services as the server assembles them, every replica local and led here."""
from __future__ import annotations

from raftbus.broker.clock import ManualClock
from raftbus.broker.context import PartitionReplica, partition_group_id
from raftbus.broker.queues.model import NewMessage
from raftbus.client.records import encode_batch
from tests.component.harness import InProcessBroker


def record(value: bytes, key: bytes | None = None, timestamp_ms: int = 5) -> bytes:
    """One record of client/records.py, as the SDK sends it."""
    return encode_batch([(timestamp_ms, key, value, ())])[0]


def message(value: bytes, **fields) -> NewMessage:
    return NewMessage(record=record(value), **fields)


class QueueBroker(InProcessBroker):
    """Admin, queue and dead-letter services of broker 1, every replica local and led here."""

    def __init__(self, **settings):
        super().__init__(1, clock=ManualClock(1_000_000), **{"default_replication_factor": 1, **settings})
        self.admin.register_broker(1, "127.0.0.1:1", "127.0.0.1:2")

    def forward(self, topic: str, partition: int, messages: list[NewMessage]):
        """What the dead-letter mover and redrives call: the broker's forwarder (local here: every replica is)."""
        return self.features.queues.forwarder(topic, partition, messages)

    def create(self, name: str, partitions: int = 1, kind: str = "queue", ordering: str = "", **options):
        view = self.admin.create_topic(name, partitions=partitions, replication_factor=1, kind=kind,
                                       ordering=ordering, **options)
        self.reconcile()
        return view.topic

    def replica(self, topic: str, partition: int = 0) -> PartitionReplica:
        """The local replica of a partition, led or not."""
        return self.context.partitions[partition_group_id(self.context.topic(topic).topic_id, partition)]

    def put(self, topic: str, *values: bytes, partition: int = 0, **fields) -> list[int]:
        _, results = self.queues.enqueue(topic, partition, [message(v, **fields) for v in values])
        return [mid for mid, _ in results]
