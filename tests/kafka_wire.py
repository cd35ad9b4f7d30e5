"""Kafka request frames built and response frames read with kio, for tests that speak the protocol by hand
(the router's unit tests, the raw-socket bad-input tests)."""
from __future__ import annotations

import io
import socket
import struct

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer


def request_frame(api_key: int, version: int, correlation_id: int, body=None, client_id: str = "test") -> bytes:
    """A whole size-prefixed request; `body` is a kio request entity (None: no body bytes)."""
    schema = load_request_schema(api_key, version)
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id.encode()
    if schema.__header_schema__.__flexible__:
        header += b"\x00"
    payload = b""
    if body is not None:
        buffer = io.BytesIO()
        entity_writer(type(body))(buffer, body)
        payload = buffer.getvalue()
    frame = header + payload
    return struct.pack(">i", len(frame)) + frame


def parse_response(api_key: int, version: int, frame: bytes):
    """(correlation_id, kio response entity) of a response frame without its size prefix."""
    schema = load_response_schema(api_key, version)
    (correlation_id,) = struct.unpack_from(">i", frame)
    pos = 4 + (1 if schema.__header_schema__.__flexible__ else 0)
    entity, _ = entity_reader(schema)(frame, pos)
    return correlation_id, entity


def read_frame(sock: socket.socket) -> bytes:
    """One size-prefixed frame's bytes; ConnectionError when the peer closed first."""
    head = _exactly(sock, 4)
    return _exactly(sock, struct.unpack(">i", head)[0])


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += chunk
    return data
