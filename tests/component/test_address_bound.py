"""Goal: on a real gRPC server, a sweep of `AddressBound` closes the connections from one source address past
`grpc_connections_per_address_max` (the newest ones) and leaves the others, those of other addresses and a real
client's calls alone."""
from __future__ import annotations

import socket

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from raftbus.broker.address_bound import AddressBound
from raftbus.broker.grpc_server import build_server
from tests.helpers import wait_until

HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
# The server listens on a loopback address of its own: its port 0 may be a port another test's broker had, and
# that test's clients, still reconnecting to 127.0.0.1 at that port, would add connections of their own.
SERVER_HOST = "127.0.0.9"


def idle(port: int, source: str) -> socket.socket:
    sock = socket.create_connection((SERVER_HOST, port), timeout=5, source_address=(source, 0))
    sock.sendall(HTTP2_PREFACE)
    sock.setblocking(False)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def test_a_sweep_closes_the_connections_of_an_address_past_its_bound():
    server, health, port = build_server(f"{SERVER_HOST}:0", [], workers_max=4, message_bytes_max=1 << 20)
    health.set("", health_pb2.HealthCheckResponse.SERVING)
    server.start()
    bound = AddressBound(port, per_address_max=3, host=SERVER_HOST)
    try:
        neighbour = socket.create_server(("127.0.0.8", port))  # the same port number on another local address
        neighbours = [socket.create_connection(("127.0.0.8", port), source_address=("127.0.0.2", 0))
                      for _ in range(2)]
        accepted = [neighbour.accept()[0] for _ in neighbours]
        first = [idle(port, "127.0.0.2") for _ in range(3)]
        other = [idle(port, "127.0.0.3") for _ in range(3)]
        wait_until(lambda: len(bound.connections()) == 6, 5, what="the first connections seen")
        late = [idle(port, "127.0.0.2") for _ in range(4)]
        channel = grpc.insecure_channel(f"{SERVER_HOST}:{port}")
        stub = health_pb2_grpc.HealthStub(channel)
        assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
        wait_until(lambda: len(bound.connections()) == 11, 5, what="every connection established")
        assert bound.sweep() == 4
        wait_until(lambda: all(closed_by_server(sock) for sock in late), 5, what="the late connections closed")
        assert not any(closed_by_server(sock) for sock in [*first, *other])
        for sock in neighbours:  # connections to another listener: left open
            sock.sendall(b"x")
        assert [sock.recv(1) for sock in accepted] == [b"x", b"x"]
        assert bound.sweep() == 0
        assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
        channel.close()
        for sock in [*first, *late, *other, *neighbours, *accepted, neighbour]:
            sock.close()
    finally:
        server.stop(0).wait()
