"""The replicated command codec: bytes the leader proposes and every replica's state machine decodes.

Produce (the hot path, binary, no per-record work):
    b"P" | producer_id_len >B | producer_id | base_sequence >q | stored value
where the stored value is what the partition keeps under its 8-byte big-endian base offset:
    record_count >I | append_time_ms >q | max_timestamp_ms >q | records_len >I | records
so a stored key + value is exactly one stored batch of client/records.py.
Trim (binary): b"T" | now_ms >q | retention_ms >q | retention_bytes >q | producer_idle_ms >q.
Read barrier: b"B" (changes nothing; applied wherever a journal or snapshot holds one; raftbus confirms reads
without a log entry, docs/replication.md).
Checkpoint: b"C" (every replica records its checksums at this index, to be compared: broker/log/digest.py).
Metadata commands: b"J" + compact JSON object with a "type" field.
"""
from __future__ import annotations

import json
import struct
from typing import NamedTuple

from raftbus.client import errors
from raftbus.client.records import STORED_HEADER

PRODUCE = "produce"
TRIM = "trim"
START_AT = "start_at"
REGISTER_BROKER = "register_broker"
CREATE_TOPIC = "create_topic"
DELETE_TOPIC = "delete_topic"
ALTER_PARTITIONS = "alter_partitions"
BARRIER = "barrier"
CHECKPOINT = "checkpoint"
ALTER_TOPIC = "alter_topic"
SET_BROKER_STATE = "set_broker_state"
INVALID = "invalid"
READ_BARRIER_COMMAND = b"B"
CHECKPOINT_COMMAND = b"C"

_SEQUENCE = struct.Struct(">q")
_TRIM = struct.Struct(">qqqq")
_PRODUCER_ID_BYTES_MAX = 255

# Required fields of each metadata command (besides "type").
_FIELDS: dict[str, dict[str, type]] = {
    REGISTER_BROKER: {"broker_id": int, "address": str, "raft_address": str, "now_ms": int},
    CREATE_TOPIC: {"name": str, "kind": str, "ordering": str, "partitions": int, "replication_factor": int,
                   "retention_ms": int, "retention_bytes": int, "now_ms": int},
    DELETE_TOPIC: {"name": str, "now_ms": int},
    ALTER_PARTITIONS: {"name": str, "partitions": int, "now_ms": int},
    ALTER_TOPIC: {"name": str, "changes": dict, "now_ms": int},
    SET_BROKER_STATE: {"broker_id": int, "state": str, "now_ms": int},
}


class ProduceCommand(NamedTuple):
    producer_id: bytes
    base_sequence: int
    value: memoryview
    record_count: int
    append_time_ms: int


class TrimCommand(NamedTuple):
    now_ms: int
    retention_ms: int
    retention_bytes: int
    producer_idle_ms: int


# ---------------------------------------------------------------------- produce
def encode_produce(now_ms: int, producer_id: bytes, base_sequence: int, record_count: int, max_timestamp_ms: int,
                   records: bytes) -> bytes:
    if len(producer_id) > _PRODUCER_ID_BYTES_MAX:
        raise errors.InvalidArgument(f"producer_id is longer than {_PRODUCER_ID_BYTES_MAX} bytes")
    return b"".join((
        b"P", bytes((len(producer_id),)), producer_id, _SEQUENCE.pack(base_sequence),
        STORED_HEADER.pack(record_count, now_ms, max_timestamp_ms, len(records)), records,
    ))


def decode_produce(command: bytes) -> ProduceCommand:
    """(producer_id, base_sequence, value, record_count, append_time_ms); CorruptBatch when malformed."""
    view = memoryview(command)
    try:
        if view[0] != ord("P"):
            raise errors.CorruptBatch("not a produce command")
        id_end = 2 + view[1]
        producer_id = bytes(view[2:id_end])
        (base_sequence,) = _SEQUENCE.unpack_from(view, id_end)
        value = view[id_end + _SEQUENCE.size:]
        record_count, append_time_ms, _, records_len = STORED_HEADER.unpack_from(value)
    except (IndexError, struct.error):
        raise errors.CorruptBatch(f"produce command of {len(view)} bytes is truncated") from None
    if records_len != len(value) - STORED_HEADER.size:
        raise errors.CorruptBatch(f"produce command claims {records_len} record bytes, "
                                  f"carries {len(value) - STORED_HEADER.size}")
    if record_count < 1 or base_sequence < 0:
        raise errors.CorruptBatch(f"produce command with record_count={record_count}, base_sequence={base_sequence}")
    return ProduceCommand(producer_id, base_sequence, value, record_count, append_time_ms)


def stored_max_timestamp_ms(value) -> int:
    """The max_timestamp_ms field of a stored value."""
    return STORED_HEADER.unpack_from(value)[2]


def stored_header(value) -> tuple[int, int, int, int]:
    """(record_count, append_time_ms, max_timestamp_ms, records_len) of a stored value."""
    return STORED_HEADER.unpack_from(value)


# ---------------------------------------------------------------------- start at (restoring a backup)
def encode_start_at(offset: int) -> bytes:
    """An empty partition's next offset becomes `offset` (b"S" | offset >q)."""
    return b"S" + _SEQUENCE.pack(offset)


def decode_start_at(command: bytes) -> int:
    if len(command) != 1 + _SEQUENCE.size or command[:1] != b"S":
        raise errors.InvalidArgument(f"start_at command of {len(command)} bytes is malformed")
    return _SEQUENCE.unpack_from(command, 1)[0]


# ---------------------------------------------------------------------- trim
def encode_trim(now_ms: int, retention_ms: int, retention_bytes: int, producer_idle_ms: int) -> bytes:
    return b"T" + _TRIM.pack(now_ms, retention_ms, retention_bytes, producer_idle_ms)


def decode_trim(command: bytes) -> TrimCommand:
    if len(command) != 1 + _TRIM.size or command[:1] != b"T":
        raise errors.InvalidArgument(f"trim command of {len(command)} bytes is malformed")
    return TrimCommand(*_TRIM.unpack_from(command, 1))


# ---------------------------------------------------------------------- metadata
def _encode_json(command_type: str, **fields) -> bytes:
    return b"J" + json.dumps({"type": command_type, **fields}, separators=(",", ":"), sort_keys=True).encode()


def encode_register_broker(*, broker_id: int, address: str, raft_address: str, now_ms: int,
                           metrics_url: str = "", kafka_address: str = "") -> bytes:
    """`metrics_url` (optional, "" = metrics off) is where the broker's Prometheus metrics are served;
    `kafka_address` (optional, "" = off) is its Kafka port."""
    optional = {"metrics_url": metrics_url} if metrics_url else {}
    if kafka_address:
        optional["kafka_address"] = kafka_address
    return _encode_json(REGISTER_BROKER, broker_id=broker_id, address=address, raft_address=raft_address,
                        now_ms=now_ms, **optional)


def encode_create_topic(*, name: str, kind: str, ordering: str, partitions: int, replication_factor: int,
                        retention_ms: int, retention_bytes: int, now_ms: int, queue: dict | None = None,
                        limits: dict | None = None) -> bytes:
    """`queue`: the QueueConfig fields of a queue topic (see model.QueueConfig); `limits`: the counts the topic
    must fit in (see model.CountLimits), stamped by the controller so every replica checks the same ones."""
    extra = {"queue": queue} if queue is not None else {}
    if limits is not None:
        extra["limits"] = limits
    return _encode_json(CREATE_TOPIC, name=name, kind=kind, ordering=ordering, partitions=partitions,
                        replication_factor=replication_factor, retention_ms=retention_ms,
                        retention_bytes=retention_bytes, now_ms=now_ms, **extra)


def encode_delete_topic(*, name: str, now_ms: int) -> bytes:
    return _encode_json(DELETE_TOPIC, name=name, now_ms=now_ms)


def encode_alter_partitions(*, name: str, partitions: int, now_ms: int, limits: dict | None = None) -> bytes:
    extra = {"limits": limits} if limits is not None else {}
    return _encode_json(ALTER_PARTITIONS, name=name, partitions=partitions, now_ms=now_ms, **extra)


def encode_set_broker_state(*, broker_id: int, state: str, now_ms: int) -> bytes:
    """`state`: model.BROKER_STATES (active, draining)."""
    return _encode_json(SET_BROKER_STATE, broker_id=broker_id, state=state, now_ms=now_ms)


def encode_alter_topic(*, name: str, changes: dict, now_ms: int) -> bytes:
    """`changes`: retention_ms, retention_bytes and queue options (model.QueueConfig fields) to set."""
    return _encode_json(ALTER_TOPIC, name=name, changes=changes, now_ms=now_ms)


def decode_json(command: bytes) -> tuple[str, dict]:
    """(type, fields) of a metadata command; InvalidArgument when malformed or missing a field."""
    try:
        payload = json.loads(bytes(command[1:]))
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.InvalidArgument(f"metadata command is not JSON: {exc}") from None
    if not isinstance(payload, dict) or payload.get("type") not in _FIELDS:
        raise errors.InvalidArgument("metadata command has no known type")
    kind = payload.pop("type")
    for name, expected in _FIELDS[kind].items():
        value = payload.get(name)
        if not isinstance(value, expected) or isinstance(value, bool):
            raise errors.InvalidArgument(f"{kind} command needs {name} as {expected.__name__}")
    return kind, payload


# ---------------------------------------------------------------------- any command
_DECODERS = {
    ord("P"): lambda command: (PRODUCE, decode_produce(command)),
    ord("T"): lambda command: (TRIM, decode_trim(command)),
    ord("B"): lambda command: (BARRIER, None),
    ord("C"): lambda command: (CHECKPOINT, None),
    ord("S"): lambda command: (START_AT, decode_start_at(command)),
    ord("J"): decode_json,
}


def decode(command) -> tuple[str, object]:
    """(kind, payload) of any command; a malformed one decodes to (INVALID, typed error), never raises."""
    try:
        decoder = _DECODERS.get(command[0]) if command else None
        if decoder is None:
            raise errors.InvalidArgument("unknown or empty command")
        return decoder(command)
    except errors.RaftbusError as exc:
        return INVALID, exc
    except Exception as exc:  # any other decoding failure is still just a bad command
        return INVALID, errors.InvalidArgument(f"malformed command: {type(exc).__name__}: {exc}")


# ---------------------------------------------------------------------- feature codecs
def register(metadata_fields: dict[str, dict[str, type]], prefix: bytes | None = None, decoder=None) -> None:
    """A feature's commands join the codec: its metadata JSON types and the leading byte of its binary commands
    (a feature with metadata commands only passes no prefix).

    Feature command modules (broker/groups/commands.py) call this when imported; the state machines that apply
    those commands import them, so a command is registered before any replica can decode it.
    """
    if prefix is None:
        _FIELDS.update(metadata_fields)
        return
    existing = _DECODERS.get(prefix[0])
    if existing is not None and existing is not decoder:
        raise ValueError(f"command prefix {prefix!r} is taken")
    _FIELDS.update(metadata_fields)
    _DECODERS[prefix[0]] = decoder
