"""`raftbus backup verify DIR [--key-file K]`: the index and every manifest decoded strictly, every file of every
backup in DIR against its SHA-256 (and, encrypted, its authentication tags), every stream file's batches framed and
gapless over the offsets its manifest names, every queue line readable, and each incremental backup starting where
the one before stopped."""
from __future__ import annotations

import hashlib
from pathlib import Path

from raftbus.client.backup.files import BackupFiles, open_backups
from raftbus.client.backup.queue_lines import decode_queue_line
from raftbus.client.backup.sealed import BackupKey
from raftbus.client.errors import CorruptBackup, CorruptBatch
from raftbus.client.records import check_framing, iter_stored_batches


def whole_file(files: BackupFiles, relpath: str, sha256: str) -> bytes:
    """The file's plaintext; CorruptBackup when missing, not authentic or not matching its SHA-256."""
    data = files.read_bytes(relpath)
    if hashlib.sha256(data).hexdigest() != sha256:
        raise CorruptBackup(f"{relpath} does not match its SHA-256")
    return data


def stream_problems(files: BackupFiles, name: str, where: str, segment: dict) -> list[str]:
    offset = segment["from"]
    try:
        for batch in iter_stored_batches(whole_file(files, f"{name}/{segment['file']}", segment["sha256"])):
            if batch.base_offset != offset:
                return [f"{where}: batch at {batch.base_offset}, expected {offset}"]
            check_framing(batch.blob, batch.record_count)
            offset += batch.record_count
    except (CorruptBackup, CorruptBatch) as exc:
        return [f"{where}: {exc.message}"]
    return [] if offset == segment["to"] else [f"{where}: batches end at {offset}, the manifest says {segment['to']}"]


def queue_problems(files: BackupFiles, name: str, where: str, entry: dict) -> list[str]:
    try:
        lines = whole_file(files, f"{name}/{entry['file']}", entry["sha256"]).splitlines()
        if len(lines) != entry["messages"]:
            return [f"{where}: {len(lines)} messages, the manifest says {entry['messages']}"]
        for number, line in enumerate(lines, 1):
            decode_queue_line(line, f"line {number}")
    except CorruptBackup as exc:
        return [f"{where}: {exc.message}"]
    return []


def verify_backup(root: Path, key: BackupKey | None = None) -> list[str]:
    """Every problem found in the backups of `root` ([] when they are whole). BackupKeyMismatch when `key` is not
    their key; InvalidArgument when `root` holds no backup."""
    files = open_backups(Path(root), key)
    try:
        backups = files.chain()
    except CorruptBackup as exc:
        return [exc.message]
    problems, ends = [], {}
    for name, manifest in backups:
        for topic, parts in manifest.streams.items():
            for p, segment in parts.items():
                where = f"{name} {topic}/{p}"
                expected = ends.get((topic, p))
                if expected is not None and segment["from"] != expected:
                    problems.append(f"{where}: starts at {segment['from']}, the backup before stopped at {expected}")
                problems += stream_problems(files, name, where, segment)
                ends[(topic, p)] = segment["to"]
        for topic, parts in manifest.queues.items():
            for p, entry in parts.items():
                problems += queue_problems(files, name, f"{name} {topic}/{p}", entry)
    return problems
