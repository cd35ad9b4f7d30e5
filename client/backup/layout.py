"""Where a backup keeps what: its index, its manifests, and the strict decoding of both.

DIR/backups.json lists the backups taken into DIR, oldest first: a full one, then incrementals, each in its own
folder `NNNN-full` or `NNNN-incremental` holding:
    manifest.json                  what the backup holds (below), with the SHA-256 of every data file
    streams/<topic>/<p>.batches    stored batches [from, to) of a stream partition, as a fetch returns them
    queues/<topic>/<p>.jsonl       a queue partition's messages, one JSON object per line (record in base64)
A manifest: {"format", "kind", "created_ms", "previous", "topics": [topic settings], "streams": {topic: {p:
{"from", "to", "file", "sha256", "bytes"}}}, "queues": {topic: {p: {"file", "sha256", "messages"}}},
"groups": {group: {topic: {p: committed offset}}}}.

The index: {"format", "backups": [names], "set_id", "encryption": null or {"cipher", "key_id", "chunk_bytes"},
"mac"}. `set_id` names this backup directory's set (random, made by its first backup); with encryption, every
file but the index is sealed (sealed.py) and `mac` is HMAC-SHA256 of the index under a key derived from the
backup key, so backups cannot be dropped from an encrypted index or added to it unnoticed.

Everything read back is decoded strictly: a manifest or index that is not what `raftbus backup create` writes
(a field missing or of another type, an unknown field, a name that is not a topic or backup name, a file path
other than the one its topic and partition give) is CORRUPT_BACKUP, and so nothing it names can point outside
the backup directory.
"""
from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from raftbus.client.errors import BackupKeyMismatch, CorruptBackup

FORMAT = 1
INDEX = "backups.json"
MANIFEST = "manifest.json"
FULL, INCREMENTAL = "full", "incremental"
BACKUP_NAME = re.compile(r"^[0-9]{4,9}-(full|incremental)$")
# a topic or group name as the brokers allow them (also a safe path component: never "." or "..")
NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
PARTITION = re.compile(r"^(0|[1-9][0-9]{0,8})$")
TOPIC_KINDS = ("stream", "queue")
# Bounds of what is read back into memory: the index and one manifest.
INDEX_BYTES_MAX = 1 << 20
MANIFEST_BYTES_MAX = 64 << 20
BACKUPS_MAX = 100_000


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

    def stream_segment(self, topic: str, partition: int) -> dict | None:
        return self.streams.get(topic, {}).get(str(partition))


@dataclass
class BackupIndex:
    backups: list[str]
    set_id: str = ""
    encryption: dict | None = None
    mac: str | None = None

    def signed_body(self) -> bytes:
        return json.dumps({"backups": self.backups, "set_id": self.set_id, "encryption": self.encryption},
                          sort_keys=True, separators=(",", ":")).encode()

    def to_json(self, key) -> str:
        mac = key.index_mac(self.signed_body()) if key is not None else None
        return json.dumps({"format": FORMAT, "backups": self.backups, "set_id": self.set_id,
                           "encryption": self.encryption, "mac": mac}, indent=1)

    @classmethod
    def new(cls, key, chunk_bytes: int) -> "BackupIndex":
        encryption = None if key is None else {"cipher": "AES-256-GCM", "key_id": key.key_id,
                                               "chunk_bytes": chunk_bytes}
        return cls([], secrets.token_hex(16), encryption)

    def check_key(self, key, root: Path) -> None:
        """BackupKeyMismatch unless `key` is this set's key (None for a plain set); CorruptBackup if the index's
        MAC does not match under it."""
        if self.encryption is None:
            if key is not None:
                raise BackupKeyMismatch(f"the backups in {root} are not encrypted: take --key-file away")
            return
        if key is None:
            raise BackupKeyMismatch(f"the backups in {root} are encrypted (key id {self.encryption['key_id']}): "
                                    "give --key-file")
        if key.key_id != self.encryption["key_id"]:
            raise BackupKeyMismatch(f"the backups in {root} are encrypted with key id "
                                    f"{self.encryption['key_id']}, and this key file's id is {key.key_id}")
        if self.mac is None or not secrets.compare_digest(self.mac, key.index_mac(self.signed_body())):
            raise CorruptBackup(f"{root / INDEX} fails authentication (backups added, removed or renamed)")


# ---------------------------------------------------------------------- decoding what is read back
def _fail(where: str, what: str):
    raise CorruptBackup(f"{where}: {what}")


def _json(data: bytes, where: str, bytes_max: int):
    if len(data) > bytes_max:
        _fail(where, f"larger than {bytes_max} bytes")
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        _fail(where, "not JSON")


def _dict(value, where: str, keys: set[str] | None = None, optional: set[str] = frozenset()) -> dict:
    if not isinstance(value, dict):
        _fail(where, "not an object")
    if keys is not None:
        missing, unknown = keys - set(value), set(value) - keys - optional
        if missing or unknown:
            _fail(where, f"fields missing {sorted(missing)} or unknown {sorted(unknown)}")
    return value


def _int(value, where: str, low: int = 0) -> int:
    if type(value) is not int or value < low:
        _fail(where, f"not an integer >= {low}")
    return value


def _str(value, where: str, pattern: re.Pattern | None = None, none: bool = False) -> str | None:
    if value is None and none:
        return None
    if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
        _fail(where, "not a valid name" if pattern is not None else "not a string")
    return value


def _name(value, where: str) -> str:
    """A topic or group name (never "." or "..", so also a safe path component)."""
    if _str(value, where, NAME) in (".", ".."):
        _fail(where, "not a valid name")
    return value


def _scalar(value, where: str):
    if value is not None and type(value) not in (int, str, bool):
        _fail(where, "not a number, string, boolean or null")
    return value


def _topic(value, where: str) -> dict:
    keys = {"name", "kind", "ordering", "partitions", "replication_factor", "retention_ms", "retention_bytes", "queue"}
    t = _dict(value, where, keys)
    _name(t["name"], f"{where}.name")
    if t["kind"] not in TOPIC_KINDS:
        _fail(where, "kind is not stream or queue")
    _str(t["ordering"], f"{where}.ordering", none=True)
    _int(t["partitions"], f"{where}.partitions", 1)
    _int(t["replication_factor"], f"{where}.replication_factor", 1)
    for name in ("retention_ms", "retention_bytes"):
        if t[name] is not None:
            _int(t[name], f"{where}.{name}", -1)
    if t["queue"] is not None:
        for option, setting in _dict(t["queue"], f"{where}.queue").items():
            _scalar(setting, f"{where}.queue.{option}")
        for link in ("dead_letter_topic", "dead_letter_of"):
            if t["queue"].get(link):
                _name(t["queue"][link], f"{where}.queue.{link}")
    return t


def _per_partition(value, where: str, decode) -> dict:
    out = {}
    for topic, parts in _dict(value, where).items():
        _name(topic, f"{where} topic {topic!r}")
        for p, entry in _dict(parts, f"{where}.{topic}").items():
            _str(p, f"{where}.{topic} partition {p!r}", PARTITION)
            out.setdefault(topic, {})[p] = decode(entry, f"{where}.{topic}.{p}", topic, p)
    return out


def _stream_segment(value, where: str, topic: str, p: str) -> dict:
    s = _dict(value, where, {"from", "to", "file", "sha256", "bytes"})
    _int(s["from"], f"{where}.from")
    if _int(s["to"], f"{where}.to") < s["from"]:
        _fail(where, "ends before it starts")
    if s["file"] != stream_file(topic, p):
        _fail(where, f"file is {s['file']!r}, not {stream_file(topic, p)!r}")
    _str(s["sha256"], f"{where}.sha256", SHA256_HEX)
    _int(s["bytes"], f"{where}.bytes")
    return s


def _queue_entry(value, where: str, topic: str, p: str) -> dict:
    q = _dict(value, where, {"file", "sha256", "messages"})
    if q["file"] != queue_file(topic, p):
        _fail(where, f"file is {q['file']!r}, not {queue_file(topic, p)!r}")
    _str(q["sha256"], f"{where}.sha256", SHA256_HEX)
    _int(q["messages"], f"{where}.messages")
    return q


def _groups(value, where: str) -> dict:
    for group, topics in _dict(value, where).items():
        _name(group, f"{where} group {group!r}")
        for topic, parts in _dict(topics, f"{where}.{group}").items():
            _name(topic, f"{where}.{group} topic {topic!r}")
            for p, offset in _dict(parts, f"{where}.{group}.{topic}").items():
                _str(p, f"{where}.{group}.{topic} partition {p!r}", PARTITION)
                _int(offset, f"{where}.{group}.{topic}.{p}")
    return value


def decode_manifest(data: bytes, where: str) -> Manifest:
    """The manifest in `data`, checked field by field; CorruptBackup naming the first thing that is wrong."""
    m = _dict(_json(data, where, MANIFEST_BYTES_MAX), where,
              {"format", "kind", "created_ms", "previous", "topics", "streams", "queues", "groups"})
    if m["format"] != FORMAT:
        _fail(where, f"format {m['format']!r}, not {FORMAT}")
    if m["kind"] not in (FULL, INCREMENTAL):
        _fail(where, "kind is not full or incremental")
    if not isinstance(m["topics"], list):
        _fail(where, "topics is not a list")
    return Manifest(kind=m["kind"], created_ms=_int(m["created_ms"], f"{where}.created_ms"),
                    previous=_str(m["previous"], f"{where}.previous", BACKUP_NAME, none=True),
                    topics=[_topic(t, f"{where}.topics[{i}]") for i, t in enumerate(m["topics"])],
                    streams=_per_partition(m["streams"], f"{where}.streams", _stream_segment),
                    queues=_per_partition(m["queues"], f"{where}.queues", _queue_entry),
                    groups=_groups(m["groups"], f"{where}.groups"))


def decode_index(data: bytes, where: str) -> BackupIndex:
    """The index in `data` (one written before sets and encryption existed has neither)."""
    i = _dict(_json(data, where, INDEX_BYTES_MAX), where, {"format", "backups"}, {"set_id", "encryption", "mac"})
    if i["format"] != FORMAT:
        _fail(where, f"format {i['format']!r}, not {FORMAT}")
    if not isinstance(i["backups"], list) or len(i["backups"]) > BACKUPS_MAX:
        _fail(where, "backups is not a list of backup names")
    names = [_str(n, f"{where}.backups", BACKUP_NAME) for n in i["backups"]]
    if len(set(names)) != len(names):
        _fail(where, "a backup is listed twice")
    encryption = i.get("encryption")
    if encryption is not None:
        _dict(encryption, f"{where}.encryption", {"cipher", "key_id", "chunk_bytes"})
        if encryption["cipher"] != "AES-256-GCM":
            _fail(where, f"cipher {encryption['cipher']!r} is not AES-256-GCM")
        _str(encryption["key_id"], f"{where}.encryption.key_id", re.compile(r"^[0-9a-f]{16}$"))
        _int(encryption["chunk_bytes"], f"{where}.encryption.chunk_bytes", 1)
    return BackupIndex(names, _str(i.get("set_id", ""), f"{where}.set_id", re.compile(r"^[0-9a-f]{0,64}$")),
                       encryption, _str(i.get("mac"), f"{where}.mac", SHA256_HEX, none=True))


def stream_file(topic: str, partition) -> str:
    return f"streams/{topic}/{partition}.batches"


def queue_file(topic: str, partition) -> str:
    return f"queues/{topic}/{partition}.jsonl"


def read_index(root: Path) -> BackupIndex | None:
    """The index of `root` (None when no backup was taken there)."""
    path = root / INDEX
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink() or not path.is_file():
        _fail(str(path), "not a regular file")
    with open(path, "rb") as f:
        return decode_index(f.read(INDEX_BYTES_MAX + 1), str(path))


def write_index(root: Path, index: BackupIndex, key) -> None:
    """backups.json, replaced atomically, owner-only."""
    tmp = root / (INDEX + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(index.to_json(key))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / INDEX)
