"""Bytes in JSON: a UTF-8 string in `value` / `key`, or base64 in `value_b64` / `key_b64` for binary data.

Incoming, at most one of the two forms may be given for each field. Outgoing, bytes that are valid UTF-8 go out
as the string field and anything else as the base64 field, so binary data never reaches a client mangled.
Header values follow the same rule: `headers` holds the UTF-8 ones, `headers_b64` the others.
"""
from __future__ import annotations

import base64
import binascii

from raftbus.client.errors import InvalidArgument


def utf8(text: str, field: str) -> bytes:
    """`text` as UTF-8; a JSON string holding a lone surrogate (`"\\ud800"`) has no UTF-8 form: InvalidArgument."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{field} is not valid Unicode text (a lone surrogate); send binary data as "
                              f"{field}_b64") from None


def incoming(text: str | None, b64: str | None, field: str) -> bytes | None:
    """The bytes of `field` given as text or base64 (None when neither is given)."""
    if text is not None and b64 is not None:
        raise InvalidArgument(f"give {field} or {field}_b64, not both")
    if b64 is None:
        return None if text is None else utf8(text, field)
    try:
        return base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument(f"{field}_b64 is not valid base64") from None


def incoming_headers(headers: dict[str, str] | None, headers_b64: dict[str, str] | None) -> list[tuple[str, bytes]]:
    pairs = [(name, utf8(value, f"headers.{name}")) for name, value in (headers or {}).items()]
    pairs += [(name, incoming(None, value, f"headers_b64.{name}")) for name, value in (headers_b64 or {}).items()]
    return pairs


def outgoing(data: bytes | None, field: str, into: dict) -> dict:
    """Put `data` into `into` as `field` (UTF-8 text) or `field_b64`; None stays `field: null`."""
    if data is None:
        into[field] = None
        return into
    try:
        into[field] = data.decode("utf-8")
    except UnicodeDecodeError:
        into[f"{field}_b64"] = base64.b64encode(data).decode("ascii")
    return into


def outgoing_headers(headers, into: dict) -> dict:
    text, binary = {}, {}
    for name, value in headers:
        if value is None:
            text[name] = None
            continue
        try:
            text[name] = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            binary[name] = base64.b64encode(value).decode("ascii")
    into["headers"] = text
    if binary:
        into["headers_b64"] = binary
    return into
