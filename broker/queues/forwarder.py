"""Enqueue on another partition's leader, for dead-letter moves and redrives (a broker acting as a client).

When this broker leads the target partition the batch goes straight to the local queue service; otherwise it
travels over gRPC to the leader, found and retried through the SDK's router (the broker may use the client
package; the client never uses the broker).
"""
from __future__ import annotations

import threading

from raftbus.client.router import Router
from raftbus.client.wire import queues_pb2 as qpb
from raftbus.client.wire import queues_pb2_grpc as qpb_grpc

from raftbus.broker.context import partition_group_id
from raftbus.broker.queues.model import NewMessage


def enqueue_message_proto(m: NewMessage) -> qpb.EnqueueMessage:
    return qpb.EnqueueMessage(record=m.record, priority=m.priority, group=m.group, deliver_at_ms=m.deliver_at_ms,
                              idempotency_key=m.idempotency_key, origin_id=m.origin_id,
                              delivery_count=m.delivery_count, enqueued_ms=m.enqueued_ms, last_error=m.last_error)


class QueueForwarder:
    def __init__(self, context, queues, *, timeout_ms: int, client_address: str, credentials: dict | None = None):
        self.context = context
        self.client_address = client_address  # this broker's: the router's first address before any is registered
        self.credentials = credentials or {}  # the SDK's tls_ca/tls_cert/tls_key/token: the broker's own
        self.queues = queues
        self.timeout_s = timeout_ms / 1000
        self._lock = threading.Lock()
        self._router: Router | None = None
        self._stubs: dict[str, qpb_grpc.QueueStub] = {}

    def __call__(self, topic: str, partition: int, messages: list[NewMessage]) -> list[tuple[int, bool]]:
        replica = self.context.partitions.get(partition_group_id(self.context.topic(topic).topic_id, partition))
        if replica is not None and replica.group.is_leader:
            return self.queues.enqueue_moved(topic, partition, messages)[1]
        request = qpb.EnqueueRequest(topic=topic, partition=partition,
                                     messages=[enqueue_message_proto(m) for m in messages],
                                     history_mac=self.queues.history.sign(topic, partition, messages))
        response = self._router_for_peers().call_partition(
            topic, partition, lambda conn: self._stub(conn).Enqueue(request, timeout=self.timeout_s))
        return [(r.message_id, r.duplicate) for r in response.results]

    def _router_for_peers(self) -> Router:
        with self._lock:
            if self._router is None:
                addresses = [b.address for b in self.context.metadata_sm.brokers().values()]
                self._router = Router(addresses or [self.client_address],
                                      request_timeout_ms=int(self.timeout_s * 1000), **self.credentials)
            return self._router

    def _stub(self, conn) -> qpb_grpc.QueueStub:
        with self._lock:
            stub = self._stubs.get(conn.address)
            if stub is None:
                stub = self._stubs[conn.address] = qpb_grpc.QueueStub(conn.channel)
            return stub

    def close(self) -> None:
        with self._lock:
            router, self._router = self._router, None
            self._stubs.clear()
        if router is not None:
            router.close()
