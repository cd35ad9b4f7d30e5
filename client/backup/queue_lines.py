"""A queue message in a backup: one JSON object per line of `queues/<topic>/<p>.jsonl`, written by create and read
back strictly by verify and restore (CORRUPT_BACKUP for anything but what create writes)."""
from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from raftbus.client.errors import CorruptBackup, CorruptBatch
from raftbus.client.records import check_framing, encode_batch

STATES = ("ready", "delayed", "in_flight", "dead")
FIELDS = {"message_id": int, "state": str, "priority": int, "group": str, "delivery_count": int, "enqueued_ms": int,
          "available_ms": int, "origin_id": int, "idempotency_key": str, "last_error": str, "record": str}
# One line at most: a record of the brokers' record_bytes_max (1 MiB) in base64, its fields, and room to spare.
QUEUE_LINE_BYTES_MAX = 8 << 20


@dataclass(frozen=True)
class QueueLine:
    state: str
    priority: int
    group: str
    available_ms: int
    idempotency_key: str
    record: bytes  # one stored record (timestamp, key, value, headers), as a batch of one frames it


def encode_queue_line(m) -> str:
    """The line of a queue message (an SDK Message)."""
    record = encode_batch([(m.timestamp_ms, m.key, m.value, m.headers)])[0]
    return json.dumps({"message_id": m.message_id, "state": m.state, "priority": m.priority, "group": m.group,
                       "delivery_count": m.delivery_count, "enqueued_ms": m.enqueued_ms,
                       "available_ms": m.available_ms, "origin_id": m.origin_id,
                       "idempotency_key": m.idempotency_key, "last_error": m.last_error,
                       "record": base64.b64encode(record).decode()})


def decode_queue_line(line: bytes | str, where: str) -> QueueLine:
    """The message of one line; CorruptBackup naming what is wrong."""
    if len(line) > QUEUE_LINE_BYTES_MAX:
        raise CorruptBackup(f"{where}: a line longer than {QUEUE_LINE_BYTES_MAX} bytes")
    try:
        m = json.loads(line)
    except (ValueError, RecursionError):
        raise CorruptBackup(f"{where}: not a JSON line") from None
    if not isinstance(m, dict) or set(m) != set(FIELDS):
        raise CorruptBackup(f"{where}: not a queue message line (its fields are not {sorted(FIELDS)})")
    for name, kind in FIELDS.items():
        if type(m[name]) is not kind:
            raise CorruptBackup(f"{where}: {name} is not a{'n integer' if kind is int else ' string'}")
    if m["state"] not in STATES:
        raise CorruptBackup(f"{where}: state {m['state']!r} is not one of {STATES}")
    try:
        record = base64.b64decode(m["record"], validate=True)
        check_framing(record, 1)
    except (binascii.Error, ValueError, CorruptBatch) as exc:
        raise CorruptBackup(f"{where}: the record does not decode ({exc})") from None
    return QueueLine(m["state"], m["priority"], m["group"], m["available_ms"], m["idempotency_key"], record)
