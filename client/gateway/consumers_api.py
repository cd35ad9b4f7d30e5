"""Consumer groups over HTTP, as the Kafka REST proxy v2 does: create an instance, subscribe it (the member
joins on its first poll), poll records, commit offsets, seek, delete it (the member leaves)."""
from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query

from raftbus.client import TopicPartition

from raftbus.gateway import settings
from raftbus.gateway.answers import (
    AssignmentAnswer,
    DeletedAnswer,
    InstanceAnswer,
    OffsetsAnswer,
    PollAnswer,
    TopicsAnswer,
)
from raftbus.gateway.errors import ERROR_RESPONSES
from raftbus.gateway.gateway import Clients, clients
from raftbus.gateway.instances import InstanceOptions
from raftbus.gateway.models import CommitBody, InstanceCreateBody, SeekBody, SeekEdgeBody, SubscriptionBody
from raftbus.gateway.records_api import record_json

router = APIRouter(prefix="/v1/consumers/{group}", tags=["consumer groups"], responses=ERROR_RESPONSES)


def _offsets_json(offsets: dict) -> list[dict]:
    return [{"topic": tp.topic, "partition": tp.partition, "offset": o} for tp, o in sorted(offsets.items())]


@router.post("/instances", summary="Create a consumer instance in a group", response_model=InstanceAnswer)
def create_instance(group: str, body: InstanceCreateBody, clients: Clients = Depends(clients)) -> dict:
    options = InstanceOptions(body.auto_offset_reset, body.enable_auto_commit, body.session_timeout_ms,
                              body.max_poll_records)
    instance = clients.consumers.create(group, body.name, options)
    return {"instance_id": instance.instance_id,
            "base_uri": f"/v1/consumers/{group}/instances/{instance.instance_id}"}


@router.post("/instances/{instance_id}/subscription", summary="Subscribe an instance to topics (join the group)",
             response_model=TopicsAnswer)
def subscribe(group: str, instance_id: str, body: SubscriptionBody, clients: Clients = Depends(clients)) -> dict:
    clients.consumers.subscribe(clients.consumers.get(group, instance_id), body.topics)
    return {"topics": sorted(set(body.topics))}


@router.get("/instances/{instance_id}/records", summary="Poll records of the instance's partitions",
            response_model=PollAnswer, response_model_exclude_unset=True)
def poll(group: str, instance_id: str,
         timeout_ms: int = Query(1_000, ge=0, le=settings.WAIT_MS_MAX, description="wait this long for records"),
         max: int = Query(settings.FETCH_RECORDS_DEFAULT, ge=1, le=settings.FETCH_RECORDS_MAX),
         clients: Clients = Depends(clients)) -> dict:
    """Records returned here count as consumed by the instance: the next commit covers them."""
    records = clients.consumers.poll(clients.consumers.get(group, instance_id), timeout_ms, max)
    return {"records": [record_json(r, with_topic=True) for r in records]}


@router.post("/instances/{instance_id}/offsets", summary="Commit offsets", response_model=OffsetsAnswer)
def commit(group: str, instance_id: str, body: CommitBody | None = None, clients: Clients = Depends(clients)) -> dict:
    """Commits the given offsets, or (no body) the position of every partition the instance owns."""
    offsets = None
    if body is not None and body.offsets is not None:
        offsets = {TopicPartition(o.topic, o.partition): o.offset for o in body.offsets}
    committed = clients.consumers.commit(clients.consumers.get(group, instance_id), offsets)
    return {"offsets": _offsets_json(committed)}


@router.post("/instances/{instance_id}/positions", summary="Seek: read partitions from given offsets",
             status_code=204)
def seek(group: str, instance_id: str, body: SeekBody, clients: Clients = Depends(clients)) -> None:
    """The next poll reads each partition from its offset; the next commit may move committed offsets back."""
    offsets = {TopicPartition(o.topic, o.partition): o.offset for o in body.offsets}
    clients.consumers.seek(clients.consumers.get(group, instance_id), offsets)


@router.post("/instances/{instance_id}/positions/{edge}", summary="Seek to the beginning or the end",
             status_code=204)
def seek_to_edge(group: str, instance_id: str, edge: Literal["beginning", "end"], body: SeekEdgeBody | None = None,
                 clients: Clients = Depends(clients)) -> None:
    partitions = None
    if body is not None and body.partitions is not None:
        partitions = [TopicPartition(p.topic, p.partition) for p in body.partitions]
    clients.consumers.seek_to_edge(clients.consumers.get(group, instance_id), edge, partitions)


@router.get("/instances/{instance_id}/assignments", summary="The partitions the instance owns now",
            response_model=AssignmentAnswer)
def assignments(group: str, instance_id: str, clients: Clients = Depends(clients)) -> dict:
    owned = clients.consumers.assignment(clients.consumers.get(group, instance_id))
    return {"partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(owned)]}


@router.delete("/instances/{instance_id}", summary="Delete an instance (its member leaves the group)",
               response_model=DeletedAnswer)
def delete_instance(group: str, instance_id: str, clients: Clients = Depends(clients)) -> dict:
    clients.consumers.delete(group, instance_id)
    return {"deleted": instance_id}
