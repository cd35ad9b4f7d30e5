"""Goal: the Kafka port bounds what a connection can take before it authenticates: at most
`connections_per_address_max` connections from one source address (others still connect), and, while auth is on,
a request frame of a connection with no principal longer than `unauthenticated_request_bytes_max` closes it before
its body is read, where an authenticated-size frame is awaited."""
from __future__ import annotations

import socket
import struct

import pytest

from raftbus.broker.kafka.listener import KafkaLimits, KafkaListener
from tests.helpers import wait_until


class AllowNothing:
    def allows(self, *_args) -> bool:
        return False


@pytest.fixture
def listener_of():
    started = []

    def start(limits: KafkaLimits, policy=None) -> KafkaListener:
        listener = KafkaListener("127.0.0.1:0", limits, policy)
        listener.start()
        started.append(listener)
        return listener

    yield start
    for listener in started:
        listener.stop()


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    sock.setblocking(False)
    return sock


def closed_by_broker(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def test_connections_beyond_the_per_address_bound_are_closed_and_other_addresses_still_connect(listener_of):
    """Three connections from 127.0.0.1 stay open, the fourth is closed at once; 127.0.0.2 still connects."""
    listener = listener_of(KafkaLimits(connections_max=10, connections_per_address_max=3))
    held = [connect(listener.port) for _ in range(3)]
    wait_until(lambda: listener.connections == 3, 5, what="three connections served")
    extra = connect(listener.port)
    wait_until(lambda: closed_by_broker(extra), 5, what="the fourth connection from one address closed")
    other = connect(listener.port, "127.0.0.2")
    wait_until(lambda: listener.connections == 4, 5, what="a connection from another address served")
    assert not any(closed_by_broker(sock) for sock in [*held, other])
    for sock in [*held, extra, other]:
        sock.close()
    wait_until(lambda: listener.connections == 0, 5, what="the connections released")
    again = [connect(listener.port) for _ in range(3)]
    wait_until(lambda: listener.connections == 3, 5, what="the address's slots free again")
    for sock in again:
        sock.close()


def test_an_unauthenticated_frame_above_its_bound_closes_the_connection(listener_of):
    """With auth on, a 100 KiB frame header from a connection without a principal closes it; with auth off the
    same header is within kafka_request_bytes_max and the broker waits for the body."""
    limits = KafkaLimits(request_bytes_max=1 << 20, unauthenticated_request_bytes_max=64 << 10)
    open_port = listener_of(limits).port
    guarded = listener_of(limits, policy=AllowNothing)
    header = struct.pack(">i", 100 << 10)
    waiting = connect(open_port)
    waiting.sendall(header)
    stranger = connect(guarded.port)
    stranger.sendall(header)
    wait_until(lambda: closed_by_broker(stranger), 5, what="the unauthenticated connection closed")
    small = connect(guarded.port)
    small.sendall(struct.pack(">i", 1000))
    wait_until(lambda: guarded.connections == 1, 5, what="a small frame awaited")
    assert not closed_by_broker(waiting) and not closed_by_broker(small)
    for sock in (waiting, stranger, small):
        sock.close()
