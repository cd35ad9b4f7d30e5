"""Key-value tables over HTTP: compacted topics read and written by key (raftbus.client.Table, docs/compaction.md).

A key in a path is its UTF-8 text (percent-encoded as URLs need); keys and values come back as text, or base64 in
`key_b64` / `value_b64` when they are not UTF-8. A watch is polled: the first call (no `after`) answers every live
key's value (all of them: the position is past them) and a `position`; each next call passes that position as
`after` and gets the changes since (up to TABLE_WATCH_EVENTS_MAX, the position then at the last one), waiting up to
`wait_ms` for one.
"""
from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Query

from raftbus.client.errors import InvalidArgument, KeyNotFound, NotCompacted
from raftbus.client.reader import EARLIEST
from raftbus.client.table import Entry

from raftbus.gateway import codec, settings
from raftbus.gateway.answers import (
    RevisionAnswer,
    TableEntryOut,
    TableHistoryAnswer,
    TableKeysAnswer,
    TableListAnswer,
    TableWatchAnswer,
    TopicOut,
)
from raftbus.gateway.errors import ERROR_RESPONSES
from raftbus.gateway.gateway import Clients, clients
from raftbus.gateway.models import TableCreateBody, TablePutBody

router = APIRouter(tags=["tables"], responses=ERROR_RESPONSES)
_POLL_SLICE_MS = 200  # a watch poll over several partitions waits on none longer than this at a time


def entry_json(key: bytes, value: bytes | None, revision: int, partition: int, timestamp_ms: int) -> dict:
    out: dict = {}
    codec.outgoing(key, "key", out)
    codec.outgoing(value, "value", out)
    out.update(revision=revision, partition=partition, timestamp_ms=timestamp_ms, deleted=value is None)
    return out


def _entry(entry: Entry) -> dict:
    return entry_json(entry.key, entry.value, entry.revision, entry.partition, entry.timestamp_ms)


def _compacted(clients: Clients, table: str):
    topic = clients.admin.describe_topic(table)
    if topic.kind != "stream" or "compact" not in topic.cleanup_policy:
        raise NotCompacted(f"{table!r} is not a table: its cleanup policy is {topic.cleanup_policy or topic.kind}")
    return topic


@router.get("/v1/tables", summary="List tables (compacted topics)", response_model=TableListAnswer)
def list_tables(clients: Clients = Depends(clients)) -> dict:
    return {"tables": [t.to_dict() for t in clients.admin.list_topics() if "compact" in t.cleanup_policy]}


@router.post("/v1/tables", summary="Create a table", status_code=201, response_model=TopicOut)
def create_table(body: TableCreateBody, clients: Clients = Depends(clients)) -> dict:
    fields = body.model_dump(exclude_none=True)
    return clients.admin.create_table(fields.pop("name"), **fields).to_dict()


@router.get("/v1/tables/{table}/keys", summary="List live keys, in byte order", response_model=TableKeysAnswer)
def list_keys(table: str, prefix: str = "", start_after: str | None = None,
              limit: int = Query(settings.TABLE_KEYS_DEFAULT, ge=1, le=settings.TABLE_KEYS_MAX),
              clients: Clients = Depends(clients)) -> dict:
    keys = []
    for key in clients.table(table).keys(prefix):
        if start_after is not None and key <= start_after.encode():
            continue
        keys.append(key)
        if len(keys) > limit:
            break
    more = len(keys) > limit
    text, binary = [], []
    for key in keys[:limit]:
        try:
            text.append(key.decode("utf-8"))
        except UnicodeDecodeError:
            binary.append(codec.outgoing(key, "key", {})["key_b64"])
    return {"keys": text, "keys_b64": binary, "more": more}


@router.get("/v1/tables/{table}/keys/{key:path}/history", summary="A key's values still in the log, oldest first",
            response_model=TableHistoryAnswer)
def history(table: str, key: str, clients: Clients = Depends(clients)) -> dict:
    return {"entries": [_entry(e) for e in clients.table(table).history(key)]}


@router.get("/v1/tables/{table}/keys/{key:path}", summary="A key's latest value (linearizable)",
            response_model=TableEntryOut)
def get_key(table: str, key: str, clients: Clients = Depends(clients)) -> dict:
    entry = clients.table(table).get(key)
    if entry is None:
        raise KeyNotFound(f"key {key!r} has no value in {table!r}")
    return _entry(entry)


@router.put("/v1/tables/{table}/keys/{key:path}", summary="Write a key's value (compare-and-set with "
            "expected_revision)", response_model=RevisionAnswer)
def put_key(table: str, key: str, body: TablePutBody, clients: Clients = Depends(clients)) -> dict:
    value = codec.incoming(body.value, body.value_b64, "value")
    if value is None:
        raise InvalidArgument("give value or value_b64 (DELETE deletes a key)")
    revision = clients.table(table).put(key, value, expected_revision=body.expected_revision)
    return {"key": key, "revision": revision}


@router.delete("/v1/tables/{table}/keys/{key:path}", summary="Delete a key (a tombstone)",
               response_model=RevisionAnswer)
def delete_key(table: str, key: str, expected_revision: int | None = Query(None, ge=-1),
               clients: Clients = Depends(clients)) -> dict:
    return {"key": key, "revision": clients.table(table).delete(key, expected_revision=expected_revision)}


def _position(text: str | None, partitions: int) -> dict[int, int] | None:
    if not text:
        return None
    try:
        position = {int(p): int(r) for p, r in (part.split(":") for part in text.split(","))}
    except ValueError:
        raise InvalidArgument(f"after is partition:revision[,partition:revision...], not {text!r}") from None
    if sorted(position) != list(range(partitions)):
        raise InvalidArgument(f"after names every partition of the table (0 to {partitions - 1}) once")
    return position


def _position_text(position: dict[int, int]) -> str:
    return ",".join(f"{p}:{r}" for p, r in sorted(position.items()))


@router.get("/v1/tables/{table}/watch", summary="Poll a watch: the current values, then the changes after a "
            "position", response_model=TableWatchAnswer)
def watch(table: str, prefix: str = "", after: str | None = None,
          wait_ms: int = Query(0, ge=0, le=settings.WAIT_MS_MAX), clients: Clients = Depends(clients)) -> dict:
    _compacted(clients, table)
    partitions = clients.router.partitions_for(table)
    raw = prefix.encode()
    position = _position(after, partitions)
    if position is None:
        return _snapshot(clients, table, raw, partitions)
    deadline = time.monotonic() + wait_ms / 1000
    events: list[dict] = []
    while True:
        for partition in range(partitions):
            slice_ms = 0 if partitions > 1 else max(int((deadline - time.monotonic()) * 1000), 0)
            result = clients.reader.fetch(table, partition, position[partition] + 1, max_wait_ms=slice_ms)
            for r in result.records:
                if len(events) >= settings.TABLE_WATCH_EVENTS_MAX:
                    break
                if r.key is not None and r.key.startswith(raw):
                    events.append(entry_json(r.key, r.value, r.offset, partition, r.timestamp_ms))
                position[partition] = r.offset
            else:  # every record taken: the position moves past the gaps too
                position[partition] = max(position[partition], result.next_offset - 1)
        if events or time.monotonic() >= deadline:
            return {"events": events, "position": _position_text(position)}
        time.sleep(min(_POLL_SLICE_MS / 1000, max(deadline - time.monotonic(), 0)))


def _snapshot(clients: Clients, table: str, prefix: bytes, partitions: int) -> dict:
    events, position = [], {}
    for partition in range(partitions):
        latest: dict = {}
        cursor = clients.reader.cursor(table, partition, EARLIEST, stop_at_end=True)
        for r in clients.reader._follow(table, cursor, None):
            if r.key is not None and r.key.startswith(prefix):
                latest[r.key] = r
        position[partition] = cursor.end_offset - 1
        events += [entry_json(r.key, r.value, r.offset, partition, r.timestamp_ms)
                   for r in sorted(latest.values(), key=lambda r: r.offset) if r.value is not None]
    return {"events": events, "position": _position_text(position)}
