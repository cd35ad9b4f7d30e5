"""Backups written without a cluster, through the same files layer `raftbus backup create` uses (plain or sealed),
for the backup unit tests."""
from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from raftbus.client.backup.files import BackupFiles, private_dirs
from raftbus.client.backup.layout import (
    FULL,
    MANIFEST,
    BackupIndex,
    Manifest,
    queue_file,
    read_index,
    stream_file,
    write_index,
)
from raftbus.client.backup.sealed import BackupKey
from raftbus.client.records import encode_batch, encode_stored_batch


def batches(first_offset: int, counts: list[int]) -> bytes:
    out, offset = b"", first_offset
    for count in counts:
        blob, n, max_ts = encode_batch([(1, None, b"v", ())] * count)
        out += encode_stored_batch(offset, n, 5, max_ts, blob)
        offset += n
    return out


def queue_line(record: bytes, **fields) -> str:
    line = {"message_id": 1, "state": "ready", "priority": 0, "group": "", "delivery_count": 0, "enqueued_ms": 1,
            "available_ms": 1, "origin_id": 0, "idempotency_key": "", "last_error": "",
            "record": base64.b64encode(record).decode()}
    return json.dumps({**line, **fields})


def message_record(value: bytes = b"m") -> bytes:
    return encode_batch([(1, None, value, ())])[0]


def write_backup(root: Path, kind: str, segment_from: int, data: bytes, to: int, queue_lines: list[str] = (),
                 key: BackupKey | None = None, chunk_bytes: int = 64) -> str:
    """One more backup in `root` (a full one starts the set) holding stream t/0 and queue q/0; its name."""
    private_dirs(root)
    index = read_index(root) or BackupIndex.new(key, chunk_bytes)
    files = BackupFiles(root, index, key)
    name = f"{len(index.backups) + 1:04d}-{kind}"
    queue_data = "".join(line + "\n" for line in queue_lines).encode()
    files.write_bytes(f"{name}/{stream_file('t', 0)}", data)
    files.write_bytes(f"{name}/{queue_file('q', 0)}", queue_data)
    manifest = Manifest(kind=kind, created_ms=1, previous=index.backups[-1] if index.backups else None,
                        topics=[topic("t", "stream"), topic("q", "queue")],
                        streams={"t": {"0": {"from": segment_from, "to": to, "file": stream_file("t", 0),
                                             "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}}},
                        queues={"q": {"0": {"file": queue_file("q", 0),
                                            "sha256": hashlib.sha256(queue_data).hexdigest(),
                                            "messages": len(queue_lines)}}},
                        groups={"g": {"t": {"0": segment_from}}})
    files.write_bytes(f"{name}/{MANIFEST}", manifest.to_json().encode())
    index.backups.append(name)
    write_index(root, index, key)
    return name


def topic(name: str, kind: str) -> dict:
    return {"name": name, "kind": kind, "ordering": None, "partitions": 1, "replication_factor": 3,
            "retention_ms": -1, "retention_bytes": -1, "queue": {"max_deliveries": 5} if kind == "queue" else None}


def full_chain(root: Path, key: BackupKey | None = None) -> None:
    write_backup(root, FULL, 10, batches(10, [3, 2]), 15, [queue_line(message_record())], key=key)
    write_backup(root, "incremental", 15, batches(15, [4]), 19, key=key)
