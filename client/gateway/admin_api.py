"""Administration over HTTP: topics (list, create, describe, alter, delete), consumer groups (list, describe
with lag) and the cluster's status."""
from __future__ import annotations

from fastapi import APIRouter, Depends

from raftbus.client.errors import InvalidArgument

from raftbus.gateway.answers import (
    ClusterAnswer,
    DeletedAnswer,
    GroupListAnswer,
    GroupOut,
    TopicListAnswer,
    TopicOut,
)
from raftbus.gateway.errors import ERROR_RESPONSES
from raftbus.gateway.gateway import Clients, clients
from raftbus.gateway.models import TopicAlterBody, TopicCreateBody

router = APIRouter(tags=["admin"], responses=ERROR_RESPONSES)


@router.get("/v1/topics", summary="List topics", response_model=TopicListAnswer)
def list_topics(clients: Clients = Depends(clients)) -> dict:
    return {"topics": [t.to_dict() for t in clients.admin.list_topics()]}


@router.post("/v1/topics", summary="Create a topic", status_code=201, response_model=TopicOut)
def create_topic(body: TopicCreateBody, clients: Clients = Depends(clients)) -> dict:
    """Answers once every partition has a leader; a queue topic comes with its dead-letter topic `<name>.dlq`."""
    fields = body.model_dump()
    return clients.admin.create_topic(fields.pop("name"), **fields).to_dict()


@router.get("/v1/topics/{topic}", summary="Describe a topic", response_model=TopicOut)
def describe_topic(topic: str, clients: Clients = Depends(clients)) -> dict:
    return clients.admin.describe_topic(topic).to_dict()


@router.patch("/v1/topics/{topic}", summary="Change retention or queue options, grow partitions",
              response_model=TopicOut)
def alter_topic(topic: str, body: TopicAlterBody, clients: Clients = Depends(clients)) -> dict:
    """Settings first, then (with `partitions`) the partitions grow; answers once every partition has a leader."""
    settings = body.model_dump(exclude_none=True, exclude={"partitions"})
    if not settings and body.partitions is None:
        raise InvalidArgument("give partitions and/or a setting to change")
    described = clients.admin.alter_topic(topic, **settings) if settings else None
    if body.partitions is not None:
        described = clients.admin.alter_partitions(topic, body.partitions)
    return described.to_dict()


@router.delete("/v1/topics/{topic}", summary="Delete a topic and its records", response_model=DeletedAnswer)
def delete_topic(topic: str, clients: Clients = Depends(clients)) -> dict:
    clients.admin.delete_topic(topic)
    return {"deleted": topic}


@router.get("/v1/groups", summary="List consumer groups", response_model=GroupListAnswer)
def list_groups(clients: Clients = Depends(clients)) -> dict:
    return {"groups": [g.to_dict() for g in clients.admin.list_groups()]}


@router.get("/v1/groups/{group}", summary="Describe a consumer group, with committed offsets and lag",
            response_model=GroupOut)
def describe_group(group: str, clients: Clients = Depends(clients)) -> dict:
    description = clients.admin.describe_group(group)
    return {**description.to_dict(), "lag_records": description.lag_records}


@router.get("/v1/cluster", summary="Brokers, controller, partition leaders and in-sync replicas",
            response_model=ClusterAnswer)
def cluster_status(clients: Clients = Depends(clients)) -> dict:
    return clients.admin.cluster_status().to_dict()
