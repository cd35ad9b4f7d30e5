"""The Queue gRPC service: translates proto ⇄ QueueService / DeadLetters calls. No business rule lives here."""
from __future__ import annotations

from raftbus.client import errors
from raftbus.client.wire import queues_pb2 as qpb
from raftbus.client.wire import queues_pb2_grpc as qpb_grpc

from raftbus.broker.queues.model import MessageView, NewMessage
from raftbus.broker.grpc_server import _error_proto, _typed, unary


# ---------------------------------------------------------------------- messages
def new_message(m: qpb.EnqueueMessage) -> NewMessage:
    return NewMessage(record=m.record, priority=m.priority, group=m.group, deliver_at_ms=m.deliver_at_ms,
                      idempotency_key=m.idempotency_key, origin_id=m.origin_id, delivery_count=m.delivery_count,
                      enqueued_ms=m.enqueued_ms, last_error=m.last_error)


def message_proto(v: MessageView) -> qpb.QueueMessage:
    return qpb.QueueMessage(message_id=v.message_id, partition=v.partition, state=v.state, priority=v.priority,
                            group=v.group, delivery_count=v.delivery_count, enqueued_ms=v.enqueued_ms,
                            available_ms=v.available_ms, lease_deadline_ms=v.lease_deadline_ms, origin_id=v.origin_id,
                            idempotency_key=v.idempotency_key, last_error=v.last_error, record=v.record)


def lease_proto(leased, packed: bool) -> qpb.LeaseResponse:
    if packed:
        return qpb.LeaseResponse(packed_messages=leased.packed())
    return qpb.LeaseResponse(messages=[message_proto(m) for m in leased])


def failures_proto(failures) -> qpb.QueueBatchResponse:
    return qpb.QueueBatchResponse(failures=[qpb.QueueItemFailure(index=i, error=_error_proto(error))
                                            for i, error in failures])


def batch_proto(answers) -> qpb.QueueBatchResponse:
    results = []
    for answer in answers:
        if isinstance(answer, errors.RaftbusError):
            results.append(qpb.QueueItemResult(error=_error_proto(answer)))
        else:
            results.append(qpb.QueueItemResult(lease_deadline_ms=answer or 0))
    return qpb.QueueBatchResponse(results=results)


def _or_minus_one(value: int | None) -> int:
    return -1 if value is None else value


def stats_proto(s) -> qpb.QueuePartitionStats:
    return qpb.QueuePartitionStats(
        partition=s.partition, ready=s.ready, delayed=s.delayed, in_flight=s.in_flight, dead=s.dead,
        oldest_ready_age_ms=_or_minus_one(s.oldest_ready_age_ms), next_delivery_ms=_or_minus_one(s.next_delivery_ms),
        enqueued_total=s.enqueued_total, groups_truncated=s.groups_truncated,
        groups=[qpb.QueueGroupStats(group=g.group, ready=g.ready, delayed=g.delayed, in_flight=g.in_flight,
                                    dead=g.dead, oldest_ready_age_ms=_or_minus_one(g.oldest_ready_age_ms))
                for g in s.groups])


class QueueServicer(qpb_grpc.QueueServicer):
    def __init__(self, queue_service, dead_letters):
        self.service = queue_service
        self.dead_letters = dead_letters

    @unary
    def Enqueue(self, request, context):
        enqueued_ms, results = self.service.enqueue(
            request.topic, request.partition, [new_message(m) for m in request.messages],
            producer_id=request.producer_id, base_sequence=request.base_sequence, history_mac=request.history_mac)
        return qpb.EnqueueResponse(request_id=request.request_id, enqueued_ms=enqueued_ms,
                                   results=[qpb.EnqueueResult(message_id=mid, duplicate=dup) for mid, dup in results])

    @unary
    def Lease(self, request, context):
        leased = self.service.lease(request.topic, request.partition, max_messages=request.max_messages,
                                    visibility_ms=request.visibility_ms, max_wait_ms=request.max_wait_ms)
        return lease_proto(leased, request.packed)

    def LeaseStream(self, request, context):
        """Server-streaming delivery: one answer per batch of leases as they become due, until cancelled."""
        try:
            for leased in self.service.lease_stream(
                    request.topic, request.partition, max_messages=request.max_messages,
                    visibility_ms=request.visibility_ms, max_in_flight=request.max_in_flight,
                    is_active=context.is_active):
                yield lease_proto(leased, request.packed)
        except Exception as exc:  # the stream ends with a typed answer
            yield qpb.LeaseResponse(error=_error_proto(_typed(exc)))

    @unary
    def Ack(self, request, context):
        if request.packed_leases:
            if request.leases:
                raise errors.InvalidArgument("an AckRequest carries leases or packed_leases, not both")
            return failures_proto(self.service.ack_packed(request.topic, request.partition, request.packed_leases,
                                                          settler_id=request.settler_id, sequence=request.sequence))
        return batch_proto(self.service.ack(request.topic, request.partition,
                                            [(ref.message_id, ref.delivery_count) for ref in request.leases],
                                            settler_id=request.settler_id, sequence=request.sequence))

    @unary
    def Nack(self, request, context):
        nacks = [(n.message_id, n.delivery_count, n.delay_ms if n.HasField("delay_ms") else None, n.reason)
                 for n in request.nacks]
        return batch_proto(self.service.nack(request.topic, request.partition, nacks,
                                             settler_id=request.settler_id, sequence=request.sequence))

    @unary
    def Extend(self, request, context):
        extensions = [(e.message_id, e.delivery_count, e.visibility_ms) for e in request.extensions]
        return batch_proto(self.service.extend(request.topic, request.partition, extensions))

    @unary
    def Get(self, request, context):
        return message_proto(self.service.get(request.topic, request.message_id))

    @unary
    def Delete(self, request, context):
        return batch_proto(self.service.delete(request.topic, request.partition, list(request.message_ids)))

    @unary
    def ChangePriority(self, request, context):
        changed = self.service.change_priority(
            request.topic, request.message_id,
            priority=request.priority if request.HasField("priority") else None,
            deliver_at_ms=request.deliver_at_ms if request.HasField("deliver_at_ms") else None)
        return message_proto(changed)

    @unary
    def Stats(self, request, context):
        return stats_proto(self.service.stats(request.topic, request.partition))

    @unary
    def Peek(self, request, context):
        peeked = self.service.peek(request.topic, request.partition, state=request.state or "ready",
                                   max_messages=request.max_messages or 10)
        return qpb.PeekResponse(messages=[message_proto(m) for m in peeked])

    @unary
    def Scan(self, request, context):
        scanned = self.service.scan(request.topic, request.partition, after_message_id=request.after_message_id,
                                    max_messages=request.max_messages or 100)
        return qpb.PeekResponse(messages=[message_proto(m) for m in scanned])

    @unary
    def Redrive(self, request, context):
        moved = self.dead_letters.redrive(request.topic, request.partition, request.max_messages)
        return qpb.RedriveResponse(moved=moved)


def queue_servicers(queue_service, dead_letters) -> list:
    return [(qpb_grpc.add_QueueServicer_to_server, QueueServicer(queue_service, dead_letters))]
