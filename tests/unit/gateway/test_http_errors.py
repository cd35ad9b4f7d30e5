"""Unit tests of the HTTP gateway's error table and byte codec (no server, no cluster)."""
from __future__ import annotations

import base64

import pytest

from raftbus.client import errors
from raftbus.gateway import codec
from raftbus.gateway.errors import HTTP_STATUS, error_body, http_status
from raftbus.gateway.leases import LeaseRef, parse_token


def test_every_error_has_an_http_status_through_its_grpc_status():
    """Goal: one table; each typed error's HTTP status follows from its row in GRPC_STATUS."""
    for cls in errors.all_error_classes():
        assert errors.GRPC_STATUS[cls] in HTTP_STATUS, cls
    assert http_status(errors.UnknownTopic("x")) == 404
    assert http_status(errors.TopicExists("x")) == 409
    assert http_status(errors.InvalidName("x")) == 400
    assert http_status(errors.Overloaded("x")) == 429
    assert http_status(errors.Unavailable("x")) == 503
    assert http_status(errors.RequestTimedOut("x")) == 504
    assert http_status(errors.Unauthenticated("x")) == 401
    assert error_body(errors.LeaderNotAvailable("no leader")) == {"code": "LEADER_NOT_AVAILABLE",
                                                                  "message": "no leader", "retriable": True}


def test_bytes_go_out_as_text_when_utf8_and_as_base64_otherwise():
    """Goal: text stays readable, binary is never mangled, and input takes exactly one of the two forms."""
    assert codec.outgoing("héllo".encode(), "value", {}) == {"value": "héllo"}
    assert codec.outgoing(b"\xff\x00", "value", {}) == {"value_b64": base64.b64encode(b"\xff\x00").decode()}
    assert codec.outgoing(None, "key", {}) == {"key": None}
    assert codec.incoming("héllo", None, "value") == "héllo".encode()
    assert codec.incoming(None, "/wA=", "value") == b"\xff\x00"
    assert codec.incoming(None, None, "value") is None
    with pytest.raises(errors.InvalidArgument):
        codec.incoming("a", "YQ==", "value")
    with pytest.raises(errors.InvalidArgument):
        codec.incoming(None, "***", "value")
    out = codec.outgoing_headers([("a", b"text"), ("b", b"\xfe")], {})
    assert out == {"headers": {"a": "text"}, "headers_b64": {"b": base64.b64encode(b"\xfe").decode()}}
    assert codec.incoming_headers({"a": "text"}, {"b": "/g=="}) == [("a", b"text"), ("b", b"\xfe")]


def test_lease_tokens_name_partition_message_and_delivery():
    """Goal: a lease token parses back into what an ack needs; anything else is INVALID_ARGUMENT."""
    assert parse_token("jobs", "2-2199023255553-3") == LeaseRef("jobs", 2, 2199023255553, 3)
    for bad in ("", "1-2", "a-b-c", "1-2-3-4", "-1-2-3"):
        with pytest.raises(errors.InvalidArgument):
            parse_token("jobs", bad)
