"""Running the gateway: bind HOST:PORT (port 0 picks a free one), check the anonymous principal with the cluster,
print one JSON `ready` line with the address on stdout, serve until SIGINT/SIGTERM (uvicorn's handlers), then close
the SDK clients. At most `connections_max` connections are open, `connections_per_address_max` from one source
address: one more is closed as soon as it is accepted, before a byte of it is read."""
from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from raftbus.client.credentials import TOKEN_FILE_ENV
from raftbus.client.errors import InvalidArgument, RaftbusError, Unavailable

from raftbus.gateway import settings
from raftbus.gateway.app import create_app
from raftbus.gateway.gateway import Gateway
from raftbus.gateway.options import GatewayOptions

log = logging.getLogger("raftbus.gateway")


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidArgument(f"--listen must be HOST:PORT, not {listen!r}")
    return host.strip("[]"), int(port)


def bind(listen: str) -> socket.socket:
    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP: asyncio sets TCP_NODELAY only on such sockets; without it every answer written in two
    # parts (headers, body) holds the body back until the client's delayed ACK of the headers (Nagle's algorithm).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidArgument(f"cannot listen on {listen}: {exc.strerror}") from None
    sock.listen(settings.LISTEN_BACKLOG)  # listening before `ready`: early connections wait for the server
    return sock


class ConnectionBounds:
    """Open connections in total and per source address (touched on the server's event loop only)."""

    def __init__(self, total_max: int, per_address_max: int):
        self.total_max, self.per_address_max = total_max, per_address_max
        self.total = 0
        self.by_address: dict[str, int] = {}

    def admit(self, address: str) -> bool:
        count = self.by_address.get(address, 0)
        if self.total >= self.total_max or count >= self.per_address_max:
            return False
        self.total += 1
        self.by_address[address] = count + 1
        return True

    def release(self, address: str) -> None:
        self.total -= 1
        left = self.by_address[address] - 1
        if left:
            self.by_address[address] = left
        else:
            del self.by_address[address]


def bounded_protocol(bounds: ConnectionBounds, base=AutoHTTPProtocol):
    """uvicorn's HTTP protocol class, closing each connection beyond `bounds` as soon as it is accepted."""

    class Bounded(base):
        _address: str | None = None

        def connection_made(self, transport):
            peer = transport.get_extra_info("peername")
            address = peer[0] if peer else "?"
            if not bounds.admit(address):
                log.warning("connection from %s refused: %d open (connections_max=%d, connections_per_address_max=%d)",
                            address, bounds.total, bounds.total_max, bounds.per_address_max)
                transport.abort()
                return
            self._address = address
            super().connection_made(transport)

        def connection_lost(self, exc):
            if self._address is None:
                return  # refused: the HTTP protocol never saw it
            bounds.release(self._address)
            self._address = None
            super().connection_lost(exc)

    return Bounded


def setup_logging(log_level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(name)s: %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(log_level.upper())
    log.propagate = False


def check_anonymous(gateway: Gateway) -> None:
    """The --anonymous principal and its token agree (InvalidArgument stops the start); an unreachable cluster
    only postpones the check to the first anonymous request."""
    try:
        gateway.check_anonymous()
    except Unavailable as exc:
        log.warning("could not check --anonymous with the cluster yet (%s): checked on first use", exc.message)


def serve(bootstrap: str, listen: str, log_level: str = "warning", options: GatewayOptions = GatewayOptions()) -> int:
    setup_logging(log_level)
    sock = bind(listen)
    gateway = Gateway(bootstrap, options)
    try:
        check_anonymous(gateway)
    except RaftbusError:
        gateway.close()
        sock.close()
        raise
    if os.environ.get(TOKEN_FILE_ENV):
        log.info("%s is set: the gateway acts with no token of its own (see --anonymous)", TOKEN_FILE_ENV)
    host, port = sock.getsockname()[:2]
    app = create_app(gateway, options.hosts_for(parse_listen(listen)[0], host))
    bounds = ConnectionBounds(options.connections_max, options.connections_per_address_max)
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, access_log=False, http=bounded_protocol(bounds)))
    print(json.dumps({"event": "ready", "address": f"{host}:{port}", "bootstrap": bootstrap}), flush=True)
    server.run(sockets=[sock])
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m raftbus.gateway.server --bootstrap B [raftbus http flags]` (the benchmarks start it so)."""
    from raftbus.gateway.cli import add_gateway_options, options_from_args

    parser = argparse.ArgumentParser(prog="python -m raftbus.gateway.server")
    parser.add_argument("--bootstrap", required=True)
    add_gateway_options(parser)
    args = parser.parse_args(argv)
    return serve(args.bootstrap, args.listen, args.log_level, options_from_args(args))


if __name__ == "__main__":
    sys.exit(main())
