"""AsyncProducer on queue topics: messages batched per partition and sent as one idempotent Enqueue, as the sync
Producer's queue path does (client/queues/producer.py): the producer id and the batch's base sequence make a
retried batch answer with the original message ids instead of enqueuing twice."""
from __future__ import annotations

import grpc

from raftbus.client.errors import error_from_rpc
from raftbus.client.producer import _Batch, queue_message
from raftbus.client.records import encode_batch
from raftbus.client.wire import queues_pb2 as qpb
from raftbus.client.wire import queues_pb2_grpc as qpb_grpc

from raftbus.client.aio.router import AsyncRouter
from raftbus.client.aio.shared import MessageMetadata

MESSAGE_OVERHEAD_BYTES = 32  # what a message costs in a batch beyond its record, group and key (as the sync path)


class MessageBatch(_Batch):
    """Queue messages bound for one partition; `records` holds their EnqueueMessage forms."""

    __slots__ = ()

    def settle(self, answer: qpb.EnqueueResponse) -> None:
        for future, result in zip(self.futures, answer.results):
            if not future.done():
                future.set_result(MessageMetadata(self.topic, self.partition, result.message_id, result.duplicate,
                                                  answer.enqueued_ms))


def message_of(timestamp_ms: int, key: bytes | None, value: bytes | None, headers, priority: int | None,
               group: str | None, deliver_at_ms: int | None, idempotency_key: str | None,
               ) -> tuple[qpb.EnqueueMessage, int]:
    """The EnqueueMessage of one message and what it counts against batch_bytes_max; InvalidArgument for
    fields of the wrong type."""
    record = encode_batch([(timestamp_ms, key, value, headers)])[0]
    message = queue_message(record, priority, group, deliver_at_ms, idempotency_key)
    return message, len(record) + len(message.group) + len(message.idempotency_key) + MESSAGE_OVERHEAD_BYTES


async def enqueue(router: AsyncRouter, request: qpb.EnqueueRequest) -> qpb.EnqueueResponse:
    """One Enqueue on the partition's leader (the producer's lane retries, keeping the batch's sequence)."""
    try:
        conn = router.connection(await router.leader_address(request.topic, request.partition))
        return await qpb_grpc.QueueStub(conn.channel).Enqueue(request, timeout=router.request_timeout_s)
    except grpc.RpcError as exc:
        raise error_from_rpc(exc) from None
