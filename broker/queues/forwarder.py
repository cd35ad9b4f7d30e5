"""Enqueue on another partition's leader, for dead-letter moves and redrives (a broker acting as a client).

When this broker leads the target partition the batch goes straight to the local queue service; otherwise it
travels over gRPC to the leader, found and retried through the SDK's router (the broker may use the client
package; the client never uses the broker).
"""
from __future__ import annotations

from raftbus.client.wire import queues_pb2 as qpb
from raftbus.client.wire import queues_pb2_grpc as qpb_grpc

from raftbus.broker.context import partition_group_id
from raftbus.broker.peer_calls import PeerCalls
from raftbus.broker.queues.model import NewMessage


def enqueue_message_proto(m: NewMessage) -> qpb.EnqueueMessage:
    return qpb.EnqueueMessage(record=m.record, priority=m.priority, group=m.group, deliver_at_ms=m.deliver_at_ms,
                              idempotency_key=m.idempotency_key, origin_id=m.origin_id,
                              delivery_count=m.delivery_count, enqueued_ms=m.enqueued_ms, last_error=m.last_error)


class QueueForwarder:
    def __init__(self, context, queues, *, timeout_ms: int, client_address: str, credentials: dict | None = None):
        self.context = context
        self.queues = queues
        self.timeout_s = timeout_ms / 1000
        self._peers = PeerCalls(context, qpb_grpc.QueueStub, timeout_s=self.timeout_s, client_address=client_address,
                                credentials=credentials)

    def __call__(self, topic: str, partition: int, messages: list[NewMessage]) -> list[tuple[int, bool]]:
        replica = self.context.partitions.get(partition_group_id(self.context.topic(topic).topic_id, partition))
        if replica is not None and replica.group.is_leader:
            return self.queues.enqueue_moved(topic, partition, messages)[1]
        request = qpb.EnqueueRequest(topic=topic, partition=partition,
                                     messages=[enqueue_message_proto(m) for m in messages],
                                     history_mac=self.queues.history.sign(topic, partition, messages))
        response = self._peers.call(topic, partition, lambda stub: stub.Enqueue(request, timeout=self.timeout_s))
        return [(r.message_id, r.duplicate) for r in response.results]

    def close(self) -> None:
        self._peers.close()
