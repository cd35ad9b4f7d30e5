"""`raftbus backup create DIR [--incremental]`: an online backup of every topic while writes go on.

Consistency: committed group offsets are read first, then each stream partition's high watermark, and the backup
holds every record below that cut (so no restored offset points past the restored records); records appended
during the backup belong to the next one. An incremental backup holds, per stream partition, the records from
where the previous backup in DIR stopped; topic settings, group offsets and queue messages (state, not a log)
are copied whole each time.
"""
from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from pathlib import Path

from raftbus.client.admin import Admin, TopicDescription
from raftbus.client.backup.layout import FULL, INCREMENTAL, MANIFEST, Manifest, add_to_index, backup_names, sha256_of
from raftbus.client.errors import InvalidArgument, OffsetOutOfRange, UnknownGroup
from raftbus.client.queues.admin import Queues
from raftbus.client.records import STORED_BATCH_OVERHEAD_BYTES, encode_batch, iter_stored_batches
from raftbus.client.wire import raftbus_pb2 as pb

FETCH_BYTES = 4 << 20

Progress = Callable[[str, int, int], None]  # (what, done, total)


def topic_settings(topic: TopicDescription) -> dict:
    """What restoring a topic needs: its kind, ordering, partitions, replication factor, retention, queue options."""
    return {"name": topic.name, "kind": topic.kind, "ordering": topic.ordering, "partitions": len(topic.partitions),
            "replication_factor": len(topic.partitions[0].replicas) if topic.partitions else 0,
            "retention_ms": topic.retention_ms, "retention_bytes": topic.retention_bytes, "queue": topic.queue}


def committed_offsets(admin: Admin) -> dict:
    """{group: {topic: {partition: offset}}} of every group's committed offsets."""
    found = {}
    for listed in admin.list_groups():
        try:
            group = admin.describe_group(listed.name)
        except UnknownGroup:
            continue  # deleted meanwhile
        offsets = {}
        for lag in group.partitions:
            if lag.committed_offset is not None:
                offsets.setdefault(lag.topic, {})[str(lag.partition)] = lag.committed_offset
        if offsets:
            found[group.name] = offsets
    return found


def high_watermarks(admin: Admin, topics: list[TopicDescription]) -> dict:
    """{topic: {partition: (log_start, high_watermark)}} of every stream partition, from their leaders."""
    cut = {}
    for topic in topics:
        if topic.kind != "stream":
            continue
        for p in range(len(topic.partitions)):
            request = pb.ListOffsetsRequest(topic=topic.name, partition=p, timestamp_ms=-2)
            answer = admin.router.call_partition(
                topic.name, p, lambda conn: conn.log.ListOffsets(request, timeout=admin.request_timeout_s))
            cut.setdefault(topic.name, {})[str(p)] = (answer.log_start_offset, answer.high_watermark)
    return cut


def copy_stream(admin: Admin, topic: str, partition: int, start: int, end: int, path: Path) -> int:
    """Write the stored batches [start, end) of a partition to `path`; returns the bytes written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    written, offset = 0, start
    with open(path, "wb") as out:
        while offset < end:
            request = pb.FetchRequest(topic=topic, partition=partition, offset=offset, max_bytes=FETCH_BYTES)
            answer = admin.router.call_partition(
                topic, partition, lambda conn: conn.log.Fetch(request, timeout=admin.request_timeout_s))
            view = memoryview(answer.batches)
            position = 0
            for batch in iter_stored_batches(view):
                size = STORED_BATCH_OVERHEAD_BYTES + len(batch.blob)
                if batch.base_offset >= end:
                    break
                if batch.base_offset != offset:
                    raise OffsetOutOfRange(f"{topic}/{partition}: expected a batch at {offset}, got "
                                           f"{batch.base_offset} (trimmed by retention while the backup ran?)")
                out.write(view[position:position + size])
                written += size
                position += size
                offset = batch.base_offset + batch.record_count
            if not answer.batches:
                raise OffsetOutOfRange(f"{topic}/{partition}: nothing to read at {offset} below {end}")
    return written


def message_line(m) -> str:
    record = encode_batch([(m.timestamp_ms, m.key, m.value, m.headers)])[0]
    return json.dumps({"message_id": m.message_id, "state": m.state, "priority": m.priority, "group": m.group,
                       "delivery_count": m.delivery_count, "enqueued_ms": m.enqueued_ms,
                       "available_ms": m.available_ms, "origin_id": m.origin_id,
                       "idempotency_key": m.idempotency_key, "last_error": m.last_error,
                       "record": base64.b64encode(record).decode()})


def copy_queue(queues: Queues, topic: str, partition: int, path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(path, "w") as out:
        for message in queues.iter_messages(topic, partition):
            out.write(message_line(message) + "\n")
            count += 1
    return count


def previous_ends(root: Path, incremental: bool) -> tuple[str | None, dict]:
    """The backup an incremental one follows, and where it stopped per stream partition."""
    names = backup_names(root)
    if not incremental:
        if names:
            raise InvalidArgument(f"{root} already holds backups; take an --incremental one, or use a new folder")
        return None, {}
    if not names:
        raise InvalidArgument(f"{root} holds no backup to be incremental to; take a full one first")
    ends = {}
    for name in names:  # a partition's end is the last backup that copied it
        for topic, parts in Manifest.load(root / name).streams.items():
            for p, segment in parts.items():
                ends[(topic, p)] = segment["to"]
    return names[-1], ends


def create_backup(bootstrap: str, root: Path, *, incremental: bool = False, progress: Progress | None = None,
                  admin_options: dict | None = None) -> Manifest:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    previous, ends = previous_ends(root, incremental)
    name = f"{len(backup_names(root)) + 1:04d}-{INCREMENTAL if incremental else FULL}"
    folder = root / name
    folder.mkdir()
    manifest = Manifest(kind=INCREMENTAL if incremental else FULL, created_ms=time.time_ns() // 1_000_000,
                        previous=previous)
    with Admin(bootstrap, **(admin_options or {})) as admin, Queues(bootstrap, **(admin_options or {})) as queues:
        topics = admin.list_topics()
        manifest.topics = [topic_settings(t) for t in topics]
        manifest.groups = committed_offsets(admin)
        cut = high_watermarks(admin, topics)
        work = [(t, p) for t in topics for p in range(len(t.partitions))]
        for done, (topic, p) in enumerate(work, 1):
            if topic.kind == "stream":
                log_start, end = cut[topic.name][str(p)]
                start = ends.get((topic.name, str(p)), log_start)
                if start < log_start:
                    raise OffsetOutOfRange(f"{topic.name}/{p}: records [{start}, {log_start}) expired before this "
                                           "incremental backup; take a full backup into a new folder")
                rel = f"streams/{topic.name}/{p}.batches"
                size = copy_stream(admin, topic.name, p, start, end, folder / rel)
                manifest.streams.setdefault(topic.name, {})[str(p)] = {
                    "from": start, "to": end, "file": rel, "sha256": sha256_of(folder / rel), "bytes": size}
            else:
                rel = f"queues/{topic.name}/{p}.jsonl"
                count = copy_queue(queues, topic.name, p, folder / rel)
                manifest.queues.setdefault(topic.name, {})[str(p)] = {
                    "file": rel, "sha256": sha256_of(folder / rel), "messages": count}
            if progress is not None:
                progress(f"{topic.name}/{p}", done, len(work))
    (folder / MANIFEST).write_text(manifest.to_json())
    add_to_index(root, name)
    return manifest
