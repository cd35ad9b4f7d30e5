"""`raftbus backup restore DIR --bootstrap OTHER`: recreate the backed-up topics in another cluster.

Every stream record lands at its original partition and offset (an empty partition first starts at the offset
its backup starts at), with its key, value, headers and timestamp; committed group offsets are set as an
operator reset would; queue messages are enqueued again with their priority, group, delivery time and
idempotency key (leased ones as ready, dead ones into the dead-letter topic; their delivery history and message
ids start afresh, since only brokers write history). The backup is verified first (CORRUPT_BACKUP if it does not
verify, BACKUP_KEY_MISMATCH for the wrong key) and nothing is restored into a cluster that already has one of its
topics. Every file is read through files.py: no path of a manifest reaches outside the backup directory.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from raftbus.client.admin import Admin
from raftbus.client.backup.files import BackupFiles, open_backups
from raftbus.client.backup.queue_lines import decode_queue_line
from raftbus.client.backup.sealed import BackupKey
from raftbus.client.backup.verify import verify_backup
from raftbus.client.errors import CorruptBackup, InternalError, TopicExists
from raftbus.client.groups.calls import GroupCalls, TopicPartition
from raftbus.client.queues.producer import QueueStubs
from raftbus.client.records import iter_stored_batches
from raftbus.client.settings import PRODUCER_ID_BYTES
from raftbus.client.wire import queues_pb2 as qpb
from raftbus.client.wire import raftbus_pb2 as pb

ENQUEUE_MESSAGES = 500
QUEUE_OPTIONS = ("max_deliveries", "backoff_base_ms", "backoff_max_ms", "max_in_flight_per_group",
                 "idempotency_window_ms")

Progress = Callable[[str, int, int], None]


def create_topics(admin: Admin, topics: list[dict]) -> None:
    existing = {t.name for t in admin.list_topics()}
    clash = sorted(existing & {t["name"] for t in topics})
    if clash:
        raise TopicExists(f"the target cluster already has {', '.join(clash)}; restore into one without them")
    brokers = len(admin.cluster_status().brokers)
    for t in topics:
        queue = t["queue"] or {}
        if queue.get("dead_letter_of"):
            continue  # created with its source topic
        options = {name: queue[name] for name in QUEUE_OPTIONS if name in queue} if t["kind"] == "queue" else {}
        admin.create_topic(t["name"], partitions=t["partitions"], replication_factor=min(t["replication_factor"],
                                                                                         brokers),
                           kind=t["kind"], ordering=t["ordering"] or None, retention_ms=t["retention_ms"],
                           retention_bytes=t["retention_bytes"], **options)


def restore_stream(admin: Admin, files: BackupFiles, segments: list[tuple[str, dict]], topic: str,
                   partition: int) -> int:
    """Produce a partition's backed-up batches so each lands at its original offset; returns records restored."""
    router, timeout_s = admin.router, admin.request_timeout_s
    start = segments[0][1]["from"]
    if start > 0:
        request = pb.StartAtRequest(topic=topic, partition=partition, offset=start)
        router.call_partition(topic, partition, lambda conn: conn.log.StartAt(request, timeout=timeout_s))
    producer_id, sequence, restored = os.urandom(PRODUCER_ID_BYTES), 0, 0
    for name, segment in segments:
        for batch in iter_stored_batches(files.read_bytes(f"{name}/{segment['file']}")):
            request = pb.ProduceRequest(topic=topic, partition=partition, producer_id=producer_id,
                                        base_sequence=sequence, record_count=batch.record_count,
                                        max_timestamp_ms=batch.max_timestamp_ms, records=bytes(batch.blob))
            answer = router.call_partition(topic, partition, lambda conn: conn.log.Produce(request, timeout=timeout_s))
            if answer.base_offset != batch.base_offset:
                raise InternalError(f"{topic}/{partition}: a batch of offset {batch.base_offset} was restored at "
                                    f"{answer.base_offset}")
            sequence += batch.record_count
            restored += batch.record_count
    return restored


def enqueue_message(line: bytes, where: str) -> tuple[bool, qpb.EnqueueMessage]:
    """(dead, the message to enqueue) of a backed-up queue line; delayed ones keep their delivery time."""
    m = decode_queue_line(line, where)
    return m.state == "dead", qpb.EnqueueMessage(
        record=m.record, priority=m.priority, group=m.group,
        deliver_at_ms=m.available_ms if m.state == "delayed" else 0, idempotency_key=m.idempotency_key)


def restore_queue(admin: Admin, files: BackupFiles, relpath: str, topic: str, partition: int,
                  dead_letter_topic: str | None, dead_letter_partitions: int) -> int:
    stubs = QueueStubs(admin.router)
    by_target: dict[tuple[str, int], list] = {}
    for number, line in enumerate(files.read_bytes(relpath).splitlines(), 1):
        dead, message = enqueue_message(line, f"{relpath} line {number}")
        target = (dead_letter_topic, partition % dead_letter_partitions) if dead and dead_letter_topic else \
            (topic, partition)
        by_target.setdefault(target, []).append(message)
    for (target, p), messages in by_target.items():
        producer_id, sequence = os.urandom(PRODUCER_ID_BYTES), 0
        for at in range(0, len(messages), ENQUEUE_MESSAGES):
            chunk = messages[at:at + ENQUEUE_MESSAGES]
            request = qpb.EnqueueRequest(topic=target, partition=p, producer_id=producer_id, base_sequence=sequence,
                                         messages=chunk)
            admin.router.call_partition(target, p, lambda conn: stubs(conn).Enqueue(request,
                                                                                  timeout=admin.request_timeout_s))
            sequence += len(chunk)
    return sum(len(m) for m in by_target.values())


def restore_offsets(admin: Admin, groups: dict, ranges: dict) -> int:
    """Set each group's committed offsets, inside the restored records' range of the partition."""
    calls, restored = GroupCalls(admin.router), 0
    for group, topics in groups.items():
        for topic, partitions in topics.items():
            for p, offset in partitions.items():
                low, high = ranges.get((topic, int(p)), (0, 0))
                calls.reset_offset(group, TopicPartition(topic, int(p)), min(max(offset, low), high))
                restored += 1
    return restored


def restore_backup(root: Path, bootstrap: str, *, progress: Progress | None = None,
                   admin_options: dict | None = None, key: BackupKey | None = None) -> dict:
    """Restore every backup of `root` (the full one, then each incremental) into the cluster at `bootstrap`."""
    root = Path(root)
    problems = verify_backup(root, key)
    if problems:
        raise CorruptBackup(f"the backup in {root} does not verify: {problems[0]} ({len(problems)} problem(s))")
    files = open_backups(root, key)
    backups = files.chain()
    last_name, last = backups[-1]
    summary = {"topics": len(last.topics), "records": 0, "messages": 0, "group_offsets": 0}
    with Admin(bootstrap, **(admin_options or {})) as admin:
        create_topics(admin, last.topics)
        settings = {t["name"]: t for t in last.topics}
        work = [(t["name"], p) for t in last.topics for p in range(t["partitions"])]
        ranges = {}
        for done, (topic, p) in enumerate(work, 1):
            if settings[topic]["kind"] == "stream":
                segments = [(name, m.stream_segment(topic, p)) for name, m in backups
                            if m.stream_segment(topic, p) is not None]
                if segments:
                    summary["records"] += restore_stream(admin, files, segments, topic, p)
                    ranges[(topic, p)] = (segments[0][1]["from"], segments[-1][1]["to"])
            else:
                entry = last.queues.get(topic, {}).get(str(p))
                dlq = (settings[topic]["queue"] or {}).get("dead_letter_topic") or None
                dlq_partitions = settings[dlq]["partitions"] if dlq in settings else 1
                if entry is not None:
                    summary["messages"] += restore_queue(admin, files, f"{last_name}/{entry['file']}", topic, p,
                                                         dlq, dlq_partitions)
            if progress is not None:
                progress(f"{topic}/{p}", done, len(work))
        summary["group_offsets"] = restore_offsets(admin, last.groups, ranges)
    return summary
