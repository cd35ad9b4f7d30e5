"""Goal: a held port can be taken by nothing but a listener bound beside the hold, and a broker given port 0
names the port it serves on before anything uses its settings."""
from __future__ import annotations

import socket

import pytest

from raftbus.broker.main import hold_port_zero
from raftbus.broker.settings import BrokerSettings
from raftbus.broker.supervisor import ReservedPorts
from raftbus.client import errors


def bind(port: int, reuse_port: bool) -> socket.socket:
    sock = socket.socket()
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    return sock


def test_a_held_port_refuses_other_binds_and_serves_a_listener_bound_beside_it():
    with ReservedPorts(2) as held:
        first, second = held.ports
        assert first != second
        with pytest.raises(OSError):
            bind(first, reuse_port=False)
        listener = bind(first, reuse_port=True)
        listener.listen()
        with socket.create_connection(("127.0.0.1", first), timeout=5) as client, listener.accept()[0] as served:
            client.sendall(b"x")
            assert served.recv(1) == b"x"
        listener.close()
        with pytest.raises(ConnectionRefusedError):  # held but not served: refused, as a free port would be
            socket.create_connection(("127.0.0.1", first), timeout=5)
        with pytest.raises(OSError):
            bind(second, reuse_port=False)
    bind(second, reuse_port=False).close()  # released by close


def test_port_zero_becomes_a_held_port_and_a_fixed_one_stays():
    settings = BrokerSettings.from_keys(listen="127.0.0.1:0", raft_listen="127.0.0.1:7071")
    bound, held = hold_port_zero(settings)
    try:
        (reserved,) = held
        assert bound.node.listen == f"127.0.0.1:{reserved.ports[0]}"
        assert bound.node.raft_listen == "127.0.0.1:7071" and bound.node.listen_reuse_port
        with pytest.raises(OSError):
            bind(reserved.ports[0], reuse_port=False)
    finally:
        for reservation in held:
            reservation.close()
    fixed = BrokerSettings.from_keys(listen="127.0.0.1:7070")
    assert hold_port_zero(fixed) == (fixed, [])


def test_a_joining_broker_may_not_take_raft_port_zero():
    settings = BrokerSettings.from_keys(raft_listen="127.0.0.1:0", join="127.0.0.1:7070")
    with pytest.raises(errors.InvalidArgument, match="fixed raft_listen"):
        hold_port_zero(settings)
