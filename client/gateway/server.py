"""Running the gateway: bind HOST:PORT (port 0 picks a free one), print one JSON `ready` line with the address
on stdout, serve until SIGINT/SIGTERM (uvicorn's handlers), then close the SDK clients."""
from __future__ import annotations

import json
import socket
import sys

import uvicorn

from raftbus.client.errors import InvalidArgument

from raftbus.gateway import settings
from raftbus.gateway.app import create_app
from raftbus.gateway.gateway import Clients


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


def serve(bootstrap: str, listen: str, log_level: str = "warning") -> int:
    sock = bind(listen)
    clients = Clients.connect(bootstrap)
    server = uvicorn.Server(uvicorn.Config(create_app(clients), log_level=log_level, access_log=False))
    host, port = sock.getsockname()[:2]
    print(json.dumps({"event": "ready", "address": f"{host}:{port}", "bootstrap": bootstrap}), flush=True)
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], sys.argv[2]))
