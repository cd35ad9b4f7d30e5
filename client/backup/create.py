"""`raftbus backup create DIR [--incremental]`: an online backup of every topic while writes go on.

Consistency: committed group offsets are read first, then each stream partition's high watermark, and the backup
holds every record below that cut (so no restored offset points past the restored records); records appended
during the backup belong to the next one. An incremental backup holds, per stream partition, the records from
where the previous backup in DIR stopped; topic settings, group offsets and queue messages (state, not a log)
are copied whole each time. With a key (`--key-file`), every file is sealed (sealed.py); an incremental backup
takes the key of the backups before it. Everything is created owner-only (directories 0700, files 0600).
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path

from raftbus.client.admin import Admin, TopicDescription
from raftbus.client.backup.files import BackupFiles, open_backups, private_dirs
from raftbus.client.backup.layout import (
    FULL,
    INCREMENTAL,
    MANIFEST,
    BackupIndex,
    Manifest,
    queue_file,
    read_index,
    stream_file,
    write_index,
)
from raftbus.client.backup.queue_lines import encode_queue_line
from raftbus.client.backup.sealed import CHUNK_BYTES, BackupKey
from raftbus.client.errors import InvalidArgument, OffsetOutOfRange, UnknownGroup
from raftbus.client.queues.admin import Queues
from raftbus.client.records import STORED_BATCH_OVERHEAD_BYTES, iter_stored_batches
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


class Digest:
    """Counts and hashes what passes through it into a writer."""

    def __init__(self, out):
        self.out, self.sha256, self.bytes = out, hashlib.sha256(), 0

    def write(self, data) -> None:
        self.out.write(data)
        self.sha256.update(data)
        self.bytes += len(data)


def copy_stream(admin: Admin, topic: str, partition: int, start: int, end: int, out) -> None:
    """Write the stored batches [start, end) of a partition to `out`."""
    offset = start
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
            position += size
            offset = batch.base_offset + batch.record_count
        if not answer.batches:
            raise OffsetOutOfRange(f"{topic}/{partition}: nothing to read at {offset} below {end}")


def copy_queue(queues: Queues, topic: str, partition: int, out) -> int:
    count = 0
    for message in queues.iter_messages(topic, partition):
        out.write((encode_queue_line(message) + "\n").encode())
        count += 1
    return count


def previous_ends(files: BackupFiles) -> tuple[str, dict]:
    """The backup an incremental one follows, and where it stopped per stream partition."""
    ends = {}
    backups = files.chain()
    for _, manifest in backups:  # a partition's end is the last backup that copied it
        for topic, parts in manifest.streams.items():
            for p, segment in parts.items():
                ends[(topic, p)] = segment["to"]
    return backups[-1][0], ends


def backup_files(root: Path, incremental: bool, key: BackupKey | None) -> tuple[BackupFiles, str | None, dict]:
    """Where the new backup goes: a new set (full) or the set it continues (incremental, same key)."""
    if not incremental:
        index = read_index(root)
        if index is not None and index.backups:
            raise InvalidArgument(f"{root} already holds backups; take an --incremental one, or use a new folder")
        return BackupFiles(root, BackupIndex.new(key, CHUNK_BYTES), key), None, {}
    try:
        files = open_backups(root, key)
    except InvalidArgument as exc:
        if "holds no raftbus backup" not in exc.message:
            raise
        raise InvalidArgument(f"{root} holds no backup to be incremental to; take a full one first") from None
    return (files, *previous_ends(files))


def create_backup(bootstrap: str, root: Path, *, incremental: bool = False, progress: Progress | None = None,
                  admin_options: dict | None = None, key: BackupKey | None = None) -> Manifest:
    root = Path(root)
    private_dirs(root)
    files, previous, ends = backup_files(root, incremental, key)
    name = f"{len(files.index.backups) + 1:04d}-{INCREMENTAL if incremental else FULL}"
    if files.path(name).exists():
        raise InvalidArgument(f"{files.path(name)} exists but is not in {root}/backups.json (left by a backup that "
                              "did not finish?): move it away")
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
                rel = stream_file(topic.name, p)
                with files.writer(f"{name}/{rel}") as out:
                    digest = Digest(out)
                    copy_stream(admin, topic.name, p, start, end, digest)
                manifest.streams.setdefault(topic.name, {})[str(p)] = {
                    "from": start, "to": end, "file": rel, "sha256": digest.sha256.hexdigest(), "bytes": digest.bytes}
            else:
                rel = queue_file(topic.name, p)
                with files.writer(f"{name}/{rel}") as out:
                    digest = Digest(out)
                    count = copy_queue(queues, topic.name, p, digest)
                manifest.queues.setdefault(topic.name, {})[str(p)] = {
                    "file": rel, "sha256": digest.sha256.hexdigest(), "messages": count}
            if progress is not None:
                progress(f"{topic.name}/{p}", done, len(work))
    files.write_bytes(f"{name}/{MANIFEST}", manifest.to_json().encode())
    files.index.backups.append(name)
    write_index(root, files.index, key)
    return manifest
