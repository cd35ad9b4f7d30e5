"""Unit tests of the checks every request passes before a route runs (guard.py), through the gateway's real ASGI
app over stand-in clients: Host, Origin, the JSON rule for state-changing calls, the body bound and the caller."""
from __future__ import annotations

import json

import pytest

from raftbus.gateway.guard import check_host, split_host
from raftbus.client import errors

from tests.unit.gateway.asgi import request
from tests.unit.gateway.fake_cluster import RecordingClients, TokenTable, make_app

JSON = {"content-type": "application/json"}
ALICE = {"authorization": "Bearer good"}
PRODUCE = "/v1/topics/t/records"
ONE_RECORD = json.dumps({"records": [{"value": "v"}]}).encode()


@pytest.fixture
def app():
    RecordingClients.built.clear()
    made, gateway = make_app()
    yield made
    gateway.close()


def test_host_names_parse_with_and_without_ports():
    """Goal: Host values and allowed entries parse alike (IPv6 in brackets or bare)."""
    assert split_host("Example.COM:8080") == ("example.com", 8080)
    assert split_host("[::1]:80") == ("::1", 80) and split_host("::1") == ("::1", None)
    check_host("localhost:9999", ("localhost",))
    check_host("gw.internal:8080", ("gw.internal:8080",))
    for host, allowed in (("gw.internal:8081", ("gw.internal:8080",)), ("evil.example", ("localhost",)),
                          (None, ("localhost",))):
        with pytest.raises(errors.HostNotAllowed):
            check_host(host, allowed)
    check_host("anything", ("*",))


def test_a_host_the_gateway_does_not_serve_is_refused_on_every_path(app):
    """Goal: a page whose DNS name was rebound to the gateway reaches nothing, not even the docs (400)."""
    for path in ("/", "/openapi.json", "/v1/topics"):
        answer = request(app, "GET", path, headers=ALICE, host="attacker.example:8080")
        assert (answer.status, answer.code) == (400, "HOST_NOT_ALLOWED"), path
    assert request(app, "GET", "/v1/topics", headers=ALICE, host="localhost:8080").status == 200
    assert request(app, "GET", "/v1/topics", headers=ALICE, host="[::1]:8080").status == 200


def test_an_origin_other_than_the_gateways_own_is_refused(app):
    """Goal: a browser request from another site's page is 403; the gateway's own pages and non-browsers pass."""
    for origin in ("http://attacker.example", "null", "http://127.0.0.1:8081", "http://127.0.0.1"):
        answer = request(app, "POST", PRODUCE, headers={**ALICE, **JSON, "origin": origin}, body=ONE_RECORD)
        assert (answer.status, answer.code) == (403, "ORIGIN_NOT_ALLOWED"), origin
    same = request(app, "POST", PRODUCE, headers={**ALICE, **JSON, "origin": "http://127.0.0.1:8080"}, body=ONE_RECORD)
    assert same.status == 200


def test_listed_origins_are_served():
    """Goal: --allowed-origins adds its list to the gateway's own origin, and nothing else."""
    made, gateway = make_app(allowed_origins=("https://console.example",))
    try:
        ok = request(made, "GET", "/v1/topics", headers={**ALICE, "origin": "https://console.example"})
        own = request(made, "GET", "/v1/topics", headers={**ALICE, "origin": "http://127.0.0.1:8080"})
        refused = request(made, "GET", "/v1/topics", headers={**ALICE, "origin": "https://other.example"})
        assert (ok.status, own.status, refused.status) == (200, 200, 403)
    finally:
        gateway.close()


def test_state_changing_calls_need_json_or_the_request_header(app):
    """Goal: what a cross-site form can send (no type, form types, text/plain) changes nothing (415)."""
    form_types = (None, "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain")
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        for content_type in form_types:
            answer = request(app, method, PRODUCE, headers={**ALICE, "content-type": content_type},
                             body=b"" if method == "DELETE" else ONE_RECORD)
            assert (answer.status, answer.code) == (415, "JSON_REQUIRED"), (method, content_type)
    assert all(not c.sent for c in RecordingClients.built)
    assert request(app, "POST", PRODUCE, headers={**ALICE, "content-type": "application/json; charset=utf-8"},
                   body=ONE_RECORD).status == 200
    # the custom header a form cannot send lets a body-less call through to its route
    answer = request(app, "POST", "/v1/consumers/g/instances/none/offsets",
                     headers={**ALICE, "x-raftbus-request": "1"})
    assert (answer.status, answer.code) == (404, "UNKNOWN_MEMBER")


def test_a_declared_oversized_body_is_refused_before_any_of_it_is_read():
    """Goal: Content-Length above request_body_bytes_max is 413 with no body chunk read."""
    made, gateway = make_app(request_body_bytes_max=1_000)
    try:
        answer = request(made, "POST", PRODUCE, headers={**ALICE, **JSON, "content-length": str(200 << 20)},
                         chunks=[b"x" * 100] * 3)
        assert (answer.status, answer.code, answer.body_chunks_read) == (413, "REQUEST_TOO_LARGE", 0)
    finally:
        gateway.close()


def test_a_streamed_body_is_refused_as_soon_as_it_passes_the_bound():
    """Goal: without Content-Length, reading stops at the first chunk that passes the bound (413)."""
    made, gateway = make_app(request_body_bytes_max=1_000)
    try:
        answer = request(made, "POST", PRODUCE, headers={**ALICE, **JSON}, chunks=[b" " * 300] * 100)
        assert (answer.status, answer.code, answer.body_chunks_read) == (413, "REQUEST_TOO_LARGE", 4)
        small = request(made, "POST", PRODUCE, headers={**ALICE, **JSON}, chunks=[ONE_RECORD[:5], ONE_RECORD[5:]])
        assert small.status == 200
    finally:
        gateway.close()


def test_callers_are_resolved_before_the_body_is_read_and_a_refused_token_builds_nothing():
    """Goal: no token (without --anonymous), another scheme or an unknown token is 401 with nothing read or built."""
    table = TokenTable()
    made, gateway = make_app(table)
    RecordingClients.built.clear()
    try:
        for headers in ({}, {"authorization": "Basic YTpi"}, {"authorization": "Bearer junk"},
                        {"authorization": "Bearer " + "x" * 5_000}):
            answer = request(made, "POST", PRODUCE, headers={**headers, **JSON}, chunks=[ONE_RECORD])
            assert (answer.status, answer.code, answer.body_chunks_read) == (401, "UNAUTHENTICATED", 0), headers
            assert answer.headers["www-authenticate"] == "Bearer"
        assert RecordingClients.built == [] and gateway.client_sets.counts() == {}
        assert table.checks == ["junk"]  # the malformed ones never reached the cluster
        assert request(made, "GET", "/openapi.json").status == 200  # the docs need no caller
    finally:
        gateway.close()


def test_a_token_the_cluster_does_not_check_is_served_and_marked():
    """Goal: on a cluster without auth the answer says the token was not checked."""
    made, gateway = make_app(TokenTable(auth_enabled=False))
    try:
        answer = request(made, "GET", "/v1/topics", headers={"authorization": "Bearer wrong"})
        assert answer.status == 200 and answer.headers["x-raftbus-token-checked"] == "false"
    finally:
        gateway.close()
    made, gateway = make_app(TokenTable())
    try:
        answer = request(made, "GET", "/v1/topics", headers=ALICE)
        assert answer.status == 200 and "x-raftbus-token-checked" not in answer.headers
    finally:
        gateway.close()
