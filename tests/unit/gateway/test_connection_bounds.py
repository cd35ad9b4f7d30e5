"""Goal: the gateway's HTTP server closes a connection beyond `connections_per_address_max` from one source address,
or beyond `connections_max` in total, as soon as it is accepted; admitted connections are served, other addresses
still connect, and a closed connection frees its slot."""
from __future__ import annotations

import socket
import threading

import pytest
import uvicorn

from raftbus.gateway.server import ConnectionBounds, bind, bounded_protocol
from tests.helpers import wait_until


async def hello(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def serving():
    started = []

    def start(total_max: int, per_address_max: int):
        bounds = ConnectionBounds(total_max, per_address_max)
        sock = bind("127.0.0.1:0")
        server = uvicorn.Server(uvicorn.Config(hello, log_level="error", http=bounded_protocol(bounds)))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        wait_until(lambda: server.started, 10, what="the server started")
        started.append((server, thread))
        return sock.getsockname()[1], bounds

    yield start
    for server, thread in started:
        server.should_exit = True
        thread.join(10)


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))


def answered(sock: socket.socket) -> bool:
    """Whether an HTTP request on `sock` gets the app's answer (False: the server closed the connection)."""
    try:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        return sock.recv(1024).startswith(b"HTTP/1.1 200")
    except (ConnectionResetError, BrokenPipeError):
        return False


def test_connections_beyond_the_bounds_are_closed_at_once(serving):
    port, bounds = serving(total_max=5, per_address_max=3)
    held = [connect(port) for _ in range(3)]
    wait_until(lambda: bounds.total == 3, 5, what="three connections admitted")
    assert not answered(connect(port))  # a fourth from 127.0.0.1
    others = [connect(port, "127.0.0.2") for _ in range(2)]
    wait_until(lambda: bounds.total == 5, 5, what="two more from another address")
    assert not answered(connect(port, "127.0.0.3"))  # a sixth in total
    assert all(answered(sock) for sock in [*held, *others])
    held.pop().close()
    wait_until(lambda: bounds.total == 4, 5, what="a slot freed")
    assert answered(connect(port))
