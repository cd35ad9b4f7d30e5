"""Goal: `AddressBound` counts established connections only: those it shut down, still open while their owner has
not closed them yet (as gRPC's core under load), are not shut down or counted again by the next sweep."""
from __future__ import annotations

import socket

from raftbus.broker.address_bound import AddressBound

HOST = "127.0.0.9"


def test_connections_shut_down_by_a_sweep_do_not_count_at_the_next_one():
    listener = socket.create_server((HOST, 0))
    port = listener.getsockname()[1]
    bound = AddressBound(port, per_address_max=3, host=HOST)
    clients, accepted = [], []  # the accepted ones are held open here: nobody closes the shut ones
    try:
        for count in (3, 2):  # the last two are seen after the first three: the newest
            clients += [socket.create_connection((HOST, port), source_address=("127.0.0.2", 0)) for _ in range(count)]
            accepted += [listener.accept()[0] for _ in range(count)]
            assert len(bound.connections()) == len(accepted)
        assert bound.sweep() == 2
        assert [c.recv(1) for c in clients[3:]] == [b"", b""]  # the two newest ended
        assert bound.sweep() == 0
        clients[0].sendall(b"x")  # the first three are left alone
        assert accepted[0].recv(1) == b"x"
    finally:
        for sock in [*clients, *accepted, listener]:
            sock.close()
