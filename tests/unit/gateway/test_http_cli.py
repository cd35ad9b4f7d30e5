"""Unit tests of the `raftbus http` command line: the subcommand, its flags and --listen parsing."""
from __future__ import annotations

import pytest

from raftbus.client import errors
from raftbus.cli.app import build_parser
from raftbus.gateway.cli import run_http
from raftbus.gateway.server import bind, parse_listen


def test_http_subcommand_takes_bootstrap_and_listen():
    """Goal: `raftbus http --bootstrap B --listen H:P` reaches the gateway's handler with both values."""
    args = build_parser().parse_args(["http", "--bootstrap", "10.0.0.1:7070", "--listen", "0.0.0.0:8081"])
    assert (args.handler, args.bootstrap, args.listen) == (run_http, "10.0.0.1:7070", "0.0.0.0:8081")
    assert build_parser().parse_args(["http"]).listen == "127.0.0.1:8080"


def test_listen_addresses_parse_or_fail_with_invalid_argument():
    """Goal: HOST:PORT (IPv6 in brackets) parses; anything else is INVALID_ARGUMENT, not a traceback."""
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen("[::1]:8080") == ("::1", 8080)
    for bad in ("8080", "host:", ":80", "host:http", "host:70000"):
        with pytest.raises(errors.InvalidArgument):
            parse_listen(bad)


def test_binding_a_busy_port_is_an_invalid_argument():
    """Goal: a port already taken is reported as such."""
    first = bind("127.0.0.1:0")
    try:
        with pytest.raises(errors.InvalidArgument, match="cannot listen"):
            bind(f"127.0.0.1:{first.getsockname()[1]}")
    finally:
        first.close()
