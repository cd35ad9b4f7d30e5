"""Stream-topic records over HTTP: produce (acknowledged after a majority commit) and fetch by offset."""
from __future__ import annotations

from concurrent.futures import Future

from fastapi import APIRouter, Depends, Query

from raftbus.client import EARLIEST, LATEST, Record
from raftbus.client.errors import EmptyBatch, InvalidArgument, RaftbusError, WrongTopicKind

from raftbus.gateway import codec, settings
from raftbus.gateway.answers import FetchAnswer, ProduceAnswer
from raftbus.gateway.errors import ERROR_RESPONSES, error_body
from raftbus.gateway.gateway import Clients, clients
from raftbus.gateway.models import ProduceBody

router = APIRouter(tags=["records"], responses=ERROR_RESPONSES)


def record_json(record: Record, with_topic: bool = False) -> dict:
    out = {"topic": record.topic, "partition": record.partition} if with_topic else {}
    out.update(offset=record.offset, timestamp_ms=record.timestamp_ms)
    codec.outgoing(record.key, "key", out)
    codec.outgoing(record.value, "value", out)
    return codec.outgoing_headers(record.headers, out)


def send_all(send, items: list) -> list[Future | RaftbusError]:
    """send(item) for each item, in order. An error before anything was sent fails the request; a later one
    becomes that item's answer (the items before it are already on their way)."""
    sent: list[Future | RaftbusError] = []
    for item in items:
        try:
            sent.append(send(item))
        except RaftbusError as err:
            if not sent:
                raise
            sent.append(err)
    return sent


def answers(sent: list[Future | RaftbusError], shape) -> list[dict]:
    """Each item's acknowledgement as shape(metadata), or {"error": ...}, in request order."""
    out = []
    for item in sent:
        try:
            out.append(shape(item.result()) if isinstance(item, Future) else {"error": error_body(item)})
        except RaftbusError as err:
            out.append({"error": error_body(err)})
    return out


def require_kind(clients: Clients, topic: str, kind: str, instead: str) -> None:
    if clients.router.topic_kind(topic) != kind:
        raise WrongTopicKind(f"{topic!r} is not a {kind} topic: use {instead}")


@router.post("/v1/topics/{topic}/records", summary="Produce records to a stream topic", response_model=ProduceAnswer,
             response_model_exclude_unset=True)
def produce(topic: str, body: ProduceBody, clients: Clients = Depends(clients)) -> dict:
    """Answers `{"offsets": [{"partition", "offset"} or {"error"}]}` in request order, once every record is
    committed on a majority of its partition's replicas."""
    if not body.records:
        raise EmptyBatch("records is empty")
    require_kind(clients, topic, "stream", f"POST /v1/queues/{topic}/messages")

    def send(r):
        return clients.producer.send(topic, codec.incoming(r.value, r.value_b64, "value"),
                                     key=codec.incoming(r.key, r.key_b64, "key"),
                                     headers=codec.incoming_headers(r.headers, r.headers_b64), partition=r.partition)

    sent = send_all(send, body.records)
    return {"offsets": answers(sent, lambda meta: {"partition": meta.partition, "offset": meta.offset})}


def start_offset(clients: Clients, topic: str, partition: int, offset: str) -> int:
    if offset in (EARLIEST, LATEST):
        log_start, high_watermark = clients.reader.offsets(topic, partition)
        return log_start if offset == EARLIEST else high_watermark
    if not offset.isdigit():
        raise InvalidArgument(f"offset must be earliest, latest or an integer >= 0, not {offset!r}")
    return int(offset)


@router.get("/v1/topics/{topic}/partitions/{partition}/records", summary="Fetch records of a partition",
            response_model=FetchAnswer, response_model_exclude_unset=True)
def fetch(topic: str, partition: int, offset: str = Query(EARLIEST, description="earliest, latest or an offset"),
          max: int = Query(settings.FETCH_RECORDS_DEFAULT, ge=1, le=settings.FETCH_RECORDS_MAX),
          wait_ms: int = Query(0, ge=0, le=settings.WAIT_MS_MAX, description="long-poll when nothing is there"),
          clients: Clients = Depends(clients)) -> dict:
    """Records at or above `offset` (at most `max`), the offset to fetch next and the high watermark."""
    start = start_offset(clients, topic, partition, offset)
    result = clients.reader.fetch(topic, partition, start, max_wait_ms=wait_ms)
    records = result.records[:max]
    next_offset = result.records[max].offset if len(result.records) > max else result.next_offset
    return {"records": [record_json(r) for r in records], "next_offset": next_offset,
            "high_watermark": result.high_watermark, "log_start_offset": result.log_start_offset}
