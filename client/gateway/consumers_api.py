"""Consumer groups over HTTP, as the Kafka REST proxy v2 does: create an instance, subscribe it (the member
joins on its first poll), poll records, commit offsets, seek, delete it (the member leaves)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fastapi import APIRouter, Depends, Query, Request

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
from raftbus.gateway.gateway import Caller, caller
from raftbus.gateway.instances import ConsumerInstance, ConsumerInstances, InstanceOptions
from raftbus.gateway.models import CommitBody, InstanceCreateBody, SeekBody, SeekEdgeBody, SubscriptionBody
from raftbus.gateway.records_api import record_json

router = APIRouter(prefix="/v1/consumers/{group}", tags=["consumer groups"], responses=ERROR_RESPONSES)


@dataclass(frozen=True)
class Access:
    """The gateway's consumer instances as one caller sees them: its own only."""

    instances: ConsumerInstances
    caller: Caller

    def get(self, group: str, instance_id: str) -> ConsumerInstance:
        return self.instances.get(group, instance_id, self.caller.principal)


def access(request: Request, found: Caller = Depends(caller)) -> Access:
    """FastAPI dependency: the consumer instances of this request's caller."""
    return Access(request.app.state.gateway.consumers, found)


def _offsets_json(offsets: dict) -> list[dict]:
    return [{"topic": tp.topic, "partition": tp.partition, "offset": o} for tp, o in sorted(offsets.items())]


@router.post("/instances", summary="Create a consumer instance in a group", response_model=InstanceAnswer)
def create_instance(group: str, body: InstanceCreateBody, access: Access = Depends(access)) -> dict:
    options = InstanceOptions(body.auto_offset_reset, body.enable_auto_commit, body.session_timeout_ms,
                              body.max_poll_records)
    instance = access.instances.create(group, body.name, options, principal=access.caller.principal,
                                       credentials=access.caller.clients.credentials)
    return {"instance_id": instance.instance_id,
            "base_uri": f"/v1/consumers/{group}/instances/{instance.instance_id}"}


@router.post("/instances/{instance_id}/subscription", summary="Subscribe an instance to topics (join the group)",
             response_model=TopicsAnswer)
def subscribe(group: str, instance_id: str, body: SubscriptionBody, access: Access = Depends(access)) -> dict:
    access.instances.subscribe(access.get(group, instance_id), body.topics)
    return {"topics": sorted(set(body.topics))}


@router.get("/instances/{instance_id}/records", summary="Poll records of the instance's partitions",
            response_model=PollAnswer, response_model_exclude_unset=True)
def poll(group: str, instance_id: str,
         timeout_ms: int = Query(1_000, ge=0, le=settings.WAIT_MS_MAX, description="wait this long for records"),
         max: int = Query(settings.FETCH_RECORDS_DEFAULT, ge=1, le=settings.FETCH_RECORDS_MAX),
         access: Access = Depends(access)) -> dict:
    """Records returned here count as consumed by the instance: the next commit covers them."""
    records = access.instances.poll(access.get(group, instance_id), timeout_ms, max)
    return {"records": [record_json(r, with_topic=True) for r in records]}


@router.post("/instances/{instance_id}/offsets", summary="Commit offsets", response_model=OffsetsAnswer)
def commit(group: str, instance_id: str, body: CommitBody | None = None, access: Access = Depends(access)) -> dict:
    """Commits the given offsets, or (no body) the position of every partition the instance owns."""
    offsets = None
    if body is not None and body.offsets is not None:
        offsets = {TopicPartition(o.topic, o.partition): o.offset for o in body.offsets}
    committed = access.instances.commit(access.get(group, instance_id), offsets)
    return {"offsets": _offsets_json(committed)}


@router.post("/instances/{instance_id}/positions", summary="Seek: read partitions from given offsets",
             status_code=204)
def seek(group: str, instance_id: str, body: SeekBody, access: Access = Depends(access)) -> None:
    """The next poll reads each partition from its offset; the next commit may move committed offsets back."""
    offsets = {TopicPartition(o.topic, o.partition): o.offset for o in body.offsets}
    access.instances.seek(access.get(group, instance_id), offsets)


@router.post("/instances/{instance_id}/positions/{edge}", summary="Seek to the beginning or the end",
             status_code=204)
def seek_to_edge(group: str, instance_id: str, edge: Literal["beginning", "end"], body: SeekEdgeBody | None = None,
                 access: Access = Depends(access)) -> None:
    partitions = None
    if body is not None and body.partitions is not None:
        partitions = [TopicPartition(p.topic, p.partition) for p in body.partitions]
    access.instances.seek_to_edge(access.get(group, instance_id), edge, partitions)


@router.get("/instances/{instance_id}/assignments", summary="The partitions the instance owns now",
            response_model=AssignmentAnswer)
def assignments(group: str, instance_id: str, access: Access = Depends(access)) -> dict:
    owned = access.instances.assignment(access.get(group, instance_id))
    return {"partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(owned)]}


@router.delete("/instances/{instance_id}", summary="Delete an instance (its member leaves the group)",
               response_model=DeletedAnswer)
def delete_instance(group: str, instance_id: str, access: Access = Depends(access)) -> dict:
    access.instances.delete(group, instance_id, access.caller.principal)
    return {"deleted": instance_id}
