"""`raftbus backup verify DIR`: every file of every backup in DIR against its SHA-256, every stream file's batches
framed and gapless over the offsets its manifest names, every queue line readable, and each incremental backup
starting where the one before stopped."""
from __future__ import annotations

import base64
import json
from pathlib import Path

from raftbus.client.backup.layout import chain, sha256_of
from raftbus.client.errors import CorruptBatch
from raftbus.client.records import check_framing, iter_stored_batches


def stream_problems(folder: Path, where: str, segment: dict) -> list[str]:
    path = folder / segment["file"]
    if not path.exists():
        return [f"{where}: {segment['file']} is missing"]
    if sha256_of(path) != segment["sha256"]:
        return [f"{where}: {segment['file']} does not match its SHA-256"]
    offset = segment["from"]
    try:
        for batch in iter_stored_batches(path.read_bytes()):
            if batch.base_offset != offset:
                return [f"{where}: batch at {batch.base_offset}, expected {offset}"]
            check_framing(batch.blob, batch.record_count)
            offset += batch.record_count
    except CorruptBatch as exc:
        return [f"{where}: {exc.message}"]
    return [] if offset == segment["to"] else [f"{where}: batches end at {offset}, the manifest says {segment['to']}"]


def queue_problems(folder: Path, where: str, entry: dict) -> list[str]:
    path = folder / entry["file"]
    if not path.exists():
        return [f"{where}: {entry['file']} is missing"]
    if sha256_of(path) != entry["sha256"]:
        return [f"{where}: {entry['file']} does not match its SHA-256"]
    lines = path.read_text().splitlines()
    if len(lines) != entry["messages"]:
        return [f"{where}: {len(lines)} messages, the manifest says {entry['messages']}"]
    try:
        for line in lines:
            check_framing(base64.b64decode(json.loads(line)["record"], validate=True), 1)
    except (ValueError, KeyError, CorruptBatch) as exc:
        return [f"{where}: unreadable message line: {exc}"]
    return []


def verify_backup(root: Path) -> list[str]:
    """Every problem found in the backups of `root` ([] when they are whole)."""
    root = Path(root)
    problems, ends = [], {}
    for name, manifest in chain(root):
        folder = root / name
        for topic, parts in manifest.streams.items():
            for p, segment in parts.items():
                where = f"{name} {topic}/{p}"
                expected = ends.get((topic, p))
                if expected is not None and segment["from"] != expected:
                    problems.append(f"{where}: starts at {segment['from']}, the backup before stopped at {expected}")
                problems += stream_problems(folder, where, segment)
                ends[(topic, p)] = segment["to"]
        for topic, parts in manifest.queues.items():
            for p, entry in parts.items():
                problems += queue_problems(folder, f"{name} {topic}/{p}", entry)
    return problems
