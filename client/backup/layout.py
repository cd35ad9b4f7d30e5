"""Where a backup keeps what, and its manifest.

DIR/backups.json lists the backups taken into DIR, oldest first: a full one, then incrementals, each in its own
folder `NNNN-full` or `NNNN-incremental` holding:
    manifest.json                  what the backup holds (below), with the SHA-256 of every data file
    streams/<topic>/<p>.batches    stored batches [from, to) of a stream partition, as a fetch returns them
    queues/<topic>/<p>.jsonl       a queue partition's messages, one JSON object per line (record in base64)
A manifest: {"format", "kind", "created_ms", "previous", "topics": [topic settings], "streams": {topic: {p:
{"from", "to", "file", "sha256", "bytes"}}}, "queues": {topic: {p: {"file", "sha256", "messages"}}},
"groups": {group: {topic: {p: committed offset}}}}.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from raftbus.client.errors import InvalidArgument

FORMAT = 1
INDEX = "backups.json"
MANIFEST = "manifest.json"
FULL, INCREMENTAL = "full", "incremental"


@dataclass
class Manifest:
    kind: str
    created_ms: int
    previous: str | None = None
    topics: list[dict] = field(default_factory=list)
    streams: dict = field(default_factory=dict)
    queues: dict = field(default_factory=dict)
    groups: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, **self.__dict__}, indent=1, sort_keys=True)

    @classmethod
    def load(cls, folder: Path) -> "Manifest":
        data = json.loads((folder / MANIFEST).read_text())
        if data.pop("format", None) != FORMAT:
            raise InvalidArgument(f"{folder / MANIFEST} is not a raftbus backup manifest of format {FORMAT}")
        return cls(**data)

    def stream_segment(self, topic: str, partition: int) -> dict | None:
        return self.streams.get(topic, {}).get(str(partition))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def backup_names(root: Path) -> list[str]:
    """The backups in `root`, oldest first ([] when none was taken there)."""
    index = root / INDEX
    return json.loads(index.read_text())["backups"] if index.exists() else []


def chain(root: Path) -> list[tuple[str, Manifest]]:
    """Every backup of `root` with its manifest, oldest first; InvalidArgument when there is none."""
    names = backup_names(root)
    if not names:
        raise InvalidArgument(f"{root} holds no raftbus backup ({INDEX} is missing)")
    return [(name, Manifest.load(root / name)) for name in names]


def add_to_index(root: Path, name: str) -> None:
    names = backup_names(root) + [name]
    (root / INDEX).write_text(json.dumps({"format": FORMAT, "backups": names}, indent=1))
