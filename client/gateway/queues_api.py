"""Queue topics over HTTP: enqueue, lease, ack / nack / extend, get, peek, delete, change priority, stats, redrive.

Message ids are the SDK's (they carry the partition). Batch calls answer per item in request order: `{}` when
done, `{"error": {...}}` for that item's typed error.
"""
from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Query

from raftbus.client import Message
from raftbus.client.errors import EmptyBatch, InvalidArgument, RaftbusError

from raftbus.gateway import codec, settings
from raftbus.gateway.answers import (
    DeletedAnswer,
    EnqueueAnswer,
    ExtendAnswer,
    MessageOut,
    MessagesAnswer,
    RedriveAnswer,
    SettleAnswer,
)
from raftbus.gateway.errors import ERROR_RESPONSES, error_body
from raftbus.gateway.gateway import Clients, clients
from raftbus.gateway.leases import lease_token, parse_token
from raftbus.gateway.models import (
    ChangePriorityBody,
    EnqueueBody,
    ExtendBody,
    LeaseBody,
    LeasesBody,
    NackBody,
    RedriveBody,
)
from raftbus.gateway.records_api import answers, require_kind, send_all

router = APIRouter(prefix="/v1/queues/{topic}", tags=["queues"], responses=ERROR_RESPONSES)


def message_json(m: Message, lease: bool = False) -> dict:
    out = {"id": m.message_id, "partition": m.partition, "state": m.state, "priority": m.priority, "group": m.group,
           "delivery_count": m.delivery_count, "enqueued_ms": m.enqueued_ms, "available_ms": m.available_ms,
           "lease_deadline_ms": m.lease_deadline_ms, "timestamp_ms": m.timestamp_ms,
           "idempotency_key": m.idempotency_key, "last_error": m.last_error}
    if lease:
        out["lease"] = lease_token(m)
    codec.outgoing(m.key, "key", out)
    codec.outgoing(m.value, "value", out)
    return codec.outgoing_headers(m.headers, out)


def item_results(errors: list[RaftbusError | None]) -> dict:
    return {"results": [{} if e is None else {"error": error_body(e)} for e in errors]}


@router.post("/messages", summary="Enqueue messages", response_model=EnqueueAnswer, response_model_exclude_unset=True)
def enqueue(topic: str, body: EnqueueBody, clients: Clients = Depends(clients)) -> dict:
    """Answers `{"messages": [{"id", "partition", "duplicate", "timestamp_ms"} or {"error"}]}` in request order,
    once each message is committed on a majority of its partition's replicas."""
    if not body.messages:
        raise EmptyBatch("messages is empty")
    require_kind(clients, topic, "queue", f"POST /v1/topics/{topic}/records")
    now_ms = time.time_ns() // 1_000_000

    def send(m):
        if m.delay_ms is not None and m.deliver_at_ms is not None:
            raise InvalidArgument("give deliver_at_ms or delay_ms, not both")
        deliver_at_ms = m.deliver_at_ms if m.delay_ms is None else now_ms + m.delay_ms
        return clients.producer.send(topic, codec.incoming(m.value, m.value_b64, "value"),
                                     key=codec.incoming(m.key, m.key_b64, "key"),
                                     headers=codec.incoming_headers(m.headers, m.headers_b64), partition=m.partition,
                                     priority=m.priority, group=m.group, deliver_at_ms=deliver_at_ms,
                                     idempotency_key=m.idempotency_key)

    sent = send_all(send, body.messages)
    return {"messages": answers(sent, lambda meta: {"id": meta.message_id, "partition": meta.partition,
                                                     "duplicate": meta.duplicate, "timestamp_ms": meta.timestamp_ms})}


@router.post("/leases", summary="Lease messages", response_model=MessagesAnswer, response_model_exclude_unset=True)
def lease(topic: str, body: LeaseBody, clients: Clients = Depends(clients)) -> dict:
    """Up to `max` messages, each leased for `visibility_ms`, in delivery order within each partition. Settle
    each one by its `lease` (acks, nacks, extend) before the lease ends, or it is delivered again."""
    require_kind(clients, topic, "queue", f"GET /v1/topics/{topic}/partitions/P/records")
    partitions = [body.partition] if body.partition is not None else list(range(clients.router.partitions_for(topic)))
    messages = clients.leaser.lease(topic, partitions, body.max, body.visibility_ms, body.wait_ms)
    return {"messages": [message_json(m, lease=True) for m in messages]}


@router.post("/acks", summary="Ack leased messages (they are done)", response_model=SettleAnswer,
             response_model_exclude_unset=True)
def ack(topic: str, body: LeasesBody, clients: Clients = Depends(clients)) -> dict:
    return item_results(clients.queues.ack_many([parse_token(topic, t) for t in body.leases]))


@router.post("/nacks", summary="Nack leased messages (deliver again later)", response_model=SettleAnswer,
             response_model_exclude_unset=True)
def nack(topic: str, body: NackBody, clients: Clients = Depends(clients)) -> dict:
    refs = [parse_token(topic, t) for t in body.leases]
    return item_results(clients.queues.nack_many(refs, body.delay_ms, body.reason))


@router.post("/extend", summary="Extend leases", response_model=ExtendAnswer, response_model_exclude_unset=True)
def extend(topic: str, body: ExtendBody, clients: Clients = Depends(clients)) -> dict:
    """Each lease now ends `visibility_ms` from now; answers each lease's new `lease_deadline_ms`."""
    futures = [clients.queues.extend(parse_token(topic, t), body.visibility_ms) for t in body.leases]
    results = []
    for future in futures:
        try:
            results.append({"lease_deadline_ms": future.result()})
        except RaftbusError as err:
            results.append({"error": error_body(err)})
    return {"results": results}


@router.get("/messages/{message_id}", summary="Get a message in any state", response_model=MessageOut,
            response_model_exclude_unset=True)
def get(topic: str, message_id: int, clients: Clients = Depends(clients)) -> dict:
    return message_json(clients.queues.get(topic, message_id))


@router.get("/messages", summary="Peek at messages without leasing them", response_model=MessagesAnswer,
            response_model_exclude_unset=True)
def peek(topic: str, state: str = Query("ready", pattern="^(ready|delayed|in_flight|dead)$"),
         max: int = Query(10, ge=1, le=settings.PEEK_MESSAGES_MAX, description="per partition"),
         partition: int | None = Query(None, ge=0), clients: Clients = Depends(clients)) -> dict:
    messages = clients.queues.peek(topic, partition, state, max)
    return {"messages": [message_json(m) for m in messages]}


@router.delete("/messages/{message_id}", summary="Delete (cancel) a message in any state",
               response_model=DeletedAnswer)
def delete(topic: str, message_id: int, clients: Clients = Depends(clients)) -> dict:
    error = clients.queues.delete(topic, [message_id])[0]
    if error is not None:
        raise error
    return {"deleted": message_id}


@router.patch("/messages/{message_id}", summary="Change a waiting message's priority or delivery time",
              response_model=MessageOut, response_model_exclude_unset=True)
def change_priority(topic: str, message_id: int, body: ChangePriorityBody, clients: Clients = Depends(clients)) -> dict:
    return message_json(clients.queues.change_priority(topic, message_id, body.priority, body.deliver_at_ms))


@router.get("/stats", summary="Ready, delayed, in flight and dead, per topic, partition and group")
def stats(topic: str, clients: Clients = Depends(clients)) -> dict:
    return clients.queues.stats(topic).to_dict()


@router.post("/redrive", summary="Move dead-lettered messages back from <topic>.dlq",
             response_model=RedriveAnswer)
def redrive(topic: str, body: RedriveBody | None = None, clients: Clients = Depends(clients)) -> dict:
    return {"moved": clients.queues.redrive(topic, body.max if body is not None else None)}
