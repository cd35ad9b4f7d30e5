"""Kafka's message schemas, through kio (generated from Kafka's own JSON message definitions): request headers,
request bodies and responses of any API and version kio knows.

Handlers build responses from plain values (`make`): ints for error codes, milliseconds for durations and times,
nested dicts and lists for nested entities; a field left out takes its schema default or its type's zero. So one
handler serves every version of its API: fields a version lacks are dropped, fields it adds get their defaults.
"""
from __future__ import annotations

import datetime
import io
import struct
import sys
from contextlib import contextmanager
from dataclasses import MISSING, fields
from functools import lru_cache
from typing import NamedTuple


@contextmanager
def _hypothesis_hidden():
    """kio registers a Hypothesis strategy for each of its types when it is imported in a process where
    Hypothesis is importable, a large part of a broker's start (README, Tests). A broker has no use for them, so
    kio is imported with Hypothesis hidden, unless the process has imported Hypothesis already (a test run that
    may want them). Hypothesis is importable again afterwards."""
    if "hypothesis" in sys.modules:
        yield
        return
    sys.modules["hypothesis"] = None  # `import hypothesis` raises ImportError, which kio takes as "not installed"
    try:
        yield
    finally:
        if sys.modules.get("hypothesis", 0) is None:
            del sys.modules["hypothesis"]


with _hypothesis_hidden():
    from kio.index import load_request_schema, load_response_schema
    from kio.schema.errors import ErrorCode
    from kio.serial import entity_reader, entity_writer
    from kio.serial._introspect import (EntityField, EntityTupleField, classify_field, get_schema_field_type,
                                        is_optional)

from raftbus.client.errors import CorruptBatch

_HEAD = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_INT32 = struct.Struct(">i")
_EPOCH = datetime.datetime.fromtimestamp(0, datetime.timezone.utc)
_INT_TYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float64"}


class MalformedRequest(Exception):
    """The frame does not parse as a request of its API key and version (answered INVALID_REQUEST or closed)."""


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_start: int  # where the request body starts in the frame


@lru_cache(maxsize=None)
def request_schema(api_key: int, version: int):
    """kio's request class of (api_key, version), or None when kio knows no such message."""
    try:
        return load_request_schema(api_key, version)
    except Exception:
        return None


@lru_cache(maxsize=None)
def response_schema(api_key: int, version: int):
    try:
        return load_response_schema(api_key, version)
    except Exception:
        return None


def peek_ids(frame) -> tuple[int, int, int] | None:
    """(api_key, api_version, correlation_id) from a frame's first 8 bytes, None when it is shorter."""
    if len(frame) < 8:
        return None
    return struct.unpack_from(">hhi", frame)


def parse_header(frame, flexible: bool) -> RequestHeader:
    """Request header v1 (or v2 with tagged fields, for flexible versions). MalformedRequest when truncated."""
    try:
        api_key, version, correlation_id, client_len = _HEAD.unpack_from(frame)
        pos = _HEAD.size
        client_id = None
        if client_len >= 0:
            if pos + client_len > len(frame):
                raise MalformedRequest("client_id runs past the end of the request")
            client_id = bytes(frame[pos:pos + client_len]).decode("utf-8", "replace")
            pos += client_len
        elif client_len != -1:
            raise MalformedRequest(f"client_id length {client_len} is negative")
        if flexible:
            pos = skip_tagged_fields(frame, pos)
    except (struct.error, IndexError):
        raise MalformedRequest(f"request header truncated ({len(frame)} bytes)") from None
    return RequestHeader(api_key, version, correlation_id, client_id, pos)


def skip_tagged_fields(frame, pos: int) -> int:
    count, pos = _uvarint(frame, pos)
    for _ in range(count):
        _tag, pos = _uvarint(frame, pos)
        size, pos = _uvarint(frame, pos)
        pos += size
        if pos > len(frame):
            raise MalformedRequest("tagged field runs past the end of the request")
    return pos


def _uvarint(frame, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        byte = frame[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise MalformedRequest("unsigned varint longer than 5 bytes")


def read_body(schema, frame, start: int):
    """The request entity of `schema` from frame[start:]; MalformedRequest when it does not parse (bytes after
    the body are ignored, as Kafka's own brokers ignore them: librdkafka's Metadata v12 carries some)."""
    try:
        entity, _size = _reader(schema)(frame, start)
    except CorruptBatch:
        raise
    except Exception as exc:  # kio's BufferUnderflow, a bad length, a bad UTF-8 string...
        raise MalformedRequest(f"{schema.__name__} v{schema.__version__} does not parse: "
                               f"{type(exc).__name__}: {exc}") from None
    return entity


@lru_cache(maxsize=None)
def _reader(schema):
    return entity_reader(schema)


@lru_cache(maxsize=None)
def _writer(schema):
    return entity_writer(schema)


def encode_response(schema, correlation_id: int, entity) -> bytes:
    """A whole response frame: size, response header (v1 with tagged fields for flexible responses, except
    ApiVersions which always answers with header v0), body."""
    buffer = io.BytesIO()
    buffer.write(b"\x00\x00\x00\x00")
    buffer.write(_INT32.pack(correlation_id))
    if schema.__header_schema__.__flexible__:
        buffer.write(b"\x00")
    _writer(schema)(buffer, entity)
    frame = buffer.getbuffer()
    _INT32.pack_into(frame, 0, len(frame) - 4)
    del frame
    return buffer.getvalue()


# ---------------------------------------------------------------------- building entities from plain values


class _Field(NamedTuple):
    name: str
    kind: str  # "entity", "entities", "value"
    kafka_type: str | None
    optional: bool
    nested: object  # the nested entity class
    default: object  # MISSING when none


@lru_cache(maxsize=None)
def _fields_of(schema) -> tuple[_Field, ...]:
    out = []
    for f in fields(schema):
        cls = classify_field(f)
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else MISSING)
        optional = is_optional(f)
        if isinstance(cls, EntityTupleField):
            out.append(_Field(f.name, "entities", None, optional, cls.type_, default))
        elif isinstance(cls, EntityField):
            out.append(_Field(f.name, "entity", None, optional, cls.type_, default))
        else:
            out.append(_Field(f.name, "values" if cls.is_array else "value", get_schema_field_type(f), optional,
                              None, default))
    return tuple(out)


def make(schema, values: dict | None = None):
    """An entity of `schema` from plain values (see the module docstring); unknown keys are ignored."""
    values = values or {}
    kwargs = {}
    for f in _fields_of(schema):
        if f.name in values:
            kwargs[f.name] = _convert(f, values[f.name])
        elif f.default is not MISSING:
            kwargs[f.name] = f.default
        else:
            kwargs[f.name] = _zero(f)
    return schema(**kwargs)


def _convert(f: _Field, value):
    if f.kind == "entities":
        return None if value is None else tuple(v if isinstance(v, f.nested) else make(f.nested, v) for v in value)
    if f.kind == "entity":
        return None if value is None else (value if isinstance(value, f.nested) else make(f.nested, value))
    if f.kind == "values":
        return None if value is None else tuple(_primitive(f.kafka_type, v, False) for v in value)
    return _primitive(f.kafka_type, value, f.optional)


def _primitive(kafka_type: str, value, optional: bool):
    if value is None and not optional and kafka_type in ("string", "bytes"):
        return "" if kafka_type == "string" else b""  # a field nullable in later versions, not in this one
    if kafka_type == "error_code":
        return ErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64":
        if isinstance(value, datetime.datetime):
            return value
        if value is None or value < 0:
            return None if optional else _EPOCH
        return _EPOCH + datetime.timedelta(milliseconds=value)
    return value


def _zero(f: _Field):
    if f.kind in ("entities", "values"):
        return None if f.optional else ()
    if f.kind == "entity":
        return None if f.optional else make(f.nested)
    if f.optional:
        return None
    t = f.kafka_type
    if t in _INT_TYPES:
        return 0
    if t == "string":
        return ""
    if t in ("bytes", "records"):
        return b""
    if t == "bool":
        return False
    if t == "error_code":
        return ErrorCode.none
    if t in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if t == "datetime_i64":
        return _EPOCH
    if t == "uuid":
        return None
    raise TypeError(f"no zero value for Kafka type {t!r}")


def millis(value) -> int:
    """A kio duration or time (or a plain int) in milliseconds; -1 for a null time."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


def error_answer(schema, code: int, message: str | None = None):
    """An entity of a response schema whose top-level error fields say `code` (what an API this broker does not
    serve at that version is answered with): nested lists empty, everything else zero."""
    values = {"error_code": code}
    names = {f.name for f in _fields_of(schema)}
    if "error_message" in names:
        values["error_message"] = message
    return make(schema, values)
