"""The dashboard: one HTML page at `/` (static files, uPlot vendored) and the JSON snapshot it polls.

The snapshot is what the page needs in one call: brokers and controller, topics with partitions, leaders, ISR
and high watermarks, consumer groups with lag, queue topics with ready / delayed / in flight / dead counts and
their enqueued totals, tables (compacted topics) with their live keys. The page turns successive snapshots into
rates and keeps the history it plots; the gateway keeps none.
"""
from __future__ import annotations

import time
from pathlib import Path

from fastapi import APIRouter, Depends
from fastapi.responses import FileResponse

from raftbus.client import GroupDescription, TopicDescription
from raftbus.client.errors import RaftbusError

from raftbus.gateway import settings
from raftbus.gateway.errors import ERROR_RESPONSES, error_body
from raftbus.gateway.gateway import Clients, clients

STATIC_DIR = Path(__file__).parent / "static"
router = APIRouter(tags=["dashboard"], responses=ERROR_RESPONSES)


@router.get("/", include_in_schema=False)
def index() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html")


def topic_json(clients: Clients, topic: TopicDescription) -> dict:
    """The topic with every partition's high watermark (from its leader when the answering broker has no replica)."""
    partitions = []
    for p in topic.partitions:
        row = p.to_dict()
        if p.high_watermark < 0 and p.leader_id is not None and topic.kind == "stream":
            try:
                row["log_start_offset"], row["high_watermark"] = clients.reader.offsets(topic.name, p.partition)
            except RaftbusError:
                pass  # left at -1: the page shows no rate for it this time
        partitions.append(row)
    known = [row["high_watermark"] for row in partitions if row["high_watermark"] >= 0]
    return {"name": topic.name, "kind": topic.kind, "ordering": topic.ordering, "partitions": partitions,
            "high_watermark_total": sum(known) if len(known) == len(partitions) else None}


def group_json(clients: Clients, group: GroupDescription, describe: bool) -> dict:
    row = {"name": group.name, "state": group.state, "generation": group.generation, "topics": list(group.topics),
           "members": len(group.members), "lag_records": None, "lag_s": None}
    if describe:
        full = clients.admin.describe_group(group.name)
        row["lag_records"] = full.lag_records
        row["lag_s"] = max((p.lag_s or 0.0 for p in full.partitions), default=0.0)
    return row


def queue_json(clients: Clients, topic: TopicDescription) -> dict:
    stats = clients.queues.stats(topic.name)
    return {"topic": topic.name, "ready": stats.ready, "delayed": stats.delayed, "in_flight": stats.in_flight,
            "dead": stats.dead, "dead_lettered": stats.dead_lettered,
            "enqueued_total": sum(p.enqueued_total for p in stats.partitions)}


def table_json(clients: Clients, topic: TopicDescription) -> dict:
    """A table (compacted topic): its live keys, counted up to DASHBOARD_TABLE_KEYS_MAX, and its high watermarks."""
    keys = 0
    for _ in clients.table(topic.name).keys():
        keys += 1
        if keys > settings.DASHBOARD_TABLE_KEYS_MAX:
            break
    row = topic_json(clients, topic)
    return {"name": topic.name, "cleanup_policy": topic.cleanup_policy, "partitions": len(topic.partitions),
            "keys": min(keys, settings.DASHBOARD_TABLE_KEYS_MAX),
            "keys_more": keys > settings.DASHBOARD_TABLE_KEYS_MAX,
            "high_watermark_total": row["high_watermark_total"]}


def section(build) -> dict:
    """One part of the snapshot, or its error (the rest of the page still shows)."""
    try:
        return {"items": build()}
    except RaftbusError as err:
        return {"items": [], "error": error_body(err)}


@router.get("/v1/dashboard", summary="Everything the dashboard shows, in one snapshot")
def snapshot(clients: Clients = Depends(clients)) -> dict:
    status = clients.admin.cluster_status()
    groups = section(lambda: [group_json(clients, g, i < settings.DASHBOARD_GROUPS_MAX)
                              for i, g in enumerate(clients.admin.list_groups())])
    queues = section(lambda: [queue_json(clients, t) for t in status.topics
                              if t.kind == "queue" and not t.name.endswith(".dlq")])
    tables = section(lambda: [table_json(clients, t) for t in status.topics if "compact" in t.cleanup_policy])
    return {"time_ms": time.time_ns() // 1_000_000, "controller_id": status.controller_id,
            "answering_broker_id": status.answering_broker_id, "brokers": [b.to_dict() for b in status.brokers],
            "topics": [topic_json(clients, t) for t in status.topics], "groups": groups, "queues": queues,
            "tables": tables}
