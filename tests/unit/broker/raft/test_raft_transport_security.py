"""RaftHub's defences: the dialer proves first, pending handshakes are bounded per source address, and mutual TLS
carries the same protocol (and refuses peers without a certificate from the cluster's CA)."""
from __future__ import annotations

import os
import socket
import ssl

import pytest

from raftbus.broker.raft import hub as wire
from raftbus.broker.raft.tls import raft_tls
from raftbus.broker.tls_dev import write_dev_pki
from tests.unit.broker.raft.test_raft_transport import (  # noqa: F401 - the fixture is used by name
    RawPeer, append_entries, connected, endpoints, mesh, pump)


@pytest.fixture
def pki(tmp_path):
    return write_dev_pki(tmp_path / "pki", [1, 2, 3])


def tls_for(pki, node_id: int):
    cert, key = pki.broker(node_id)
    return raft_tls(str(cert), str(key), str(pki.ca_file))


def received_without_blocking(sock: socket.socket) -> bytes:
    data = bytearray()
    try:
        while chunk := sock.recv(65536):
            data.extend(chunk)
    except BlockingIOError:
        pass
    return bytes(data)


# ---------------------------------------------------------------------------------------------- handshake order
def test_the_acceptor_proves_nothing_before_the_dialer_does(endpoints):
    """A dialer that says hello but sends no proof (or a wrong one) receives the acceptor's hello and nothing
    else: no proof it could test secret guesses against offline."""
    b = endpoints(2, handshake_timeout_ms=300)
    b.hub.set_peers({1: "127.0.0.1:1"})
    silent = RawPeer(b)
    silent.send(wire.hello_bytes(1, os.urandom(wire.NONCE_BYTES)))
    hello = silent.read(wire.HELLO.size)
    assert wire.parse_hello(hello)[0] == 2
    pump([b], lambda: b.hub.stats()["handshakes_rejected"] == 1, what="the silent dialer to time out")
    assert received_without_blocking(silent.sock) == b""

    guesser = RawPeer(b, secret=b"g" * 32)
    guesser.send_hello_and_proof()
    pump([b], lambda: b.hub.stats()["handshakes_rejected"] == 2, what="the wrong proof to be refused")
    assert received_without_blocking(guesser.sock) == b""  # the hello was read by send_hello_and_proof
    assert b.events == []


# ---------------------------------------------------------------------------------------------- bounds
def test_idle_sockets_from_one_address_leave_room_for_real_peers(endpoints):
    """Many idle connections from one source address take at most its share of pending handshakes: the rest are
    closed at once, and peers from other addresses still connect while the idle ones are held open."""
    a = endpoints(1, handshake_timeout_ms=60_000)
    b = endpoints(2, handshake_timeout_ms=60_000, handshakes_pending_max=16, handshakes_pending_per_address_max=4)
    host, port = wire.parse_address(b.hub.address)
    idle = []
    try:
        for _ in range(40):  # from 127.0.0.2: another loopback address than the real peer's
            sock = socket.socket()
            sock.bind(("127.0.0.2", 0))
            sock.connect((host, port))
            idle.append(sock)
        pump([b], lambda: b.hub.stats()["handshakes_over_limit"] == 36, what="36 idle sockets refused")
        assert b.hub.stats()["handshakes_pending"] == 4
        mesh(a, b)
        connected([a, b])
        assert a.hub.send(2, "meta", "through") and pump([a, b], lambda: b.messages, what="a message")
        assert b.messages == [(1, "meta", "through")]
    finally:
        for sock in idle:
            sock.close()


# ---------------------------------------------------------------------------------------------- TLS
def test_tls_hubs_exchange_messages_in_order_both_ways(endpoints, pki, monkeypatch):
    """Under mutual TLS, three hubs connect pairwise and deliver small, pysyncobj-shaped and multi-megabyte
    messages in order, with frames many TLS records long, a small receive buffer and a small read budget per
    poll (so reads stop with bytes still queued in the kernel or in OpenSSL)."""
    monkeypatch.setattr(wire, "RECV_BYTES_PER_POLL_MAX", 50_001)
    monkeypatch.setattr(wire, "RECV_BUFFER_BYTES", 7_001)
    hubs = [endpoints(n, tls=tls_for(pki, n)) for n in (1, 2, 3)]
    mesh(*hubs)
    connected(hubs)
    big = os.urandom(10 << 20)
    sent = {}
    for i in range(12):
        for sender in hubs:
            for receiver in hubs:
                if receiver is not sender:
                    message = big if i in (6, 7) else append_entries(i) if i % 2 else {"type": "ping", "n": i}
                    assert sender.hub.send(receiver.node_id, f"p{i % 3}.0", message)
                    sent.setdefault((sender.node_id, receiver.node_id), []).append((f"p{i % 3}.0", message))
        if i % 3 == 0:
            for endpoint in hubs:
                endpoint.step()
    pump(hubs, lambda: all(len(e.messages) == 24 for e in hubs), timeout_s=60, what="24 messages at each hub")
    for receiver in hubs:
        for sender in hubs:
            if sender is not receiver:
                assert receiver.from_peer(sender.node_id) == sent[(sender.node_id, receiver.node_id)]
    assert all(e.hub.stats()["tls_handshakes_failed"] == 0 for e in hubs)


def test_a_tls_hub_refuses_plaintext_and_foreign_certificates(endpoints, pki, tmp_path):
    """A plaintext raftbus hello, and a hub whose certificate another CA signed, never reach the handshake; the
    genuine TLS pair connects."""
    other = write_dev_pki(tmp_path / "other", [1])
    a_foreign = endpoints(1, tls=tls_for(other, 1))
    b = endpoints(2, tls=tls_for(pki, 2))
    mesh(a_foreign, b)
    plain = RawPeer(b)
    plain.send(wire.hello_bytes(1, os.urandom(wire.NONCE_BYTES)))
    pump([a_foreign, b], lambda: b.hub.stats()["tls_handshakes_failed"] >= 3, what="refused TLS handshakes")
    pump([b], plain.closed_by_hub, what="the plaintext dialer to be closed")
    assert not b.hub.connected_peers() and b.events == [] and b.hub.stats()["handshakes_ok"] == 0
    a = endpoints(1, tls=tls_for(pki, 1))
    mesh(a, b)
    connected([a, b])


def test_a_tls_peer_must_present_a_certificate(endpoints, pki):
    """A TLS client that trusts the CA but presents no certificate of its own is refused."""
    b = endpoints(2, tls=tls_for(pki, 2))
    b.hub.set_peers({1: "127.0.0.1:1"})
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=str(pki.ca_file))
    host, port = wire.parse_address(b.hub.address)
    sock = socket.create_connection((host, port), timeout=5)
    sock.setblocking(False)
    client = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)

    def refused():
        try:
            client.do_handshake()
            client.sendall(wire.hello_bytes(1, os.urandom(wire.NONCE_BYTES)))
            return client.recv(1) == b""
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False
        except (ssl.SSLError, ConnectionError):
            return True
    pump([b], refused, what="the certificate-less client to be refused")
    client.close()
    assert b.hub.stats()["handshakes_ok"] == 0 and b.events == []


# ---------------------------------------------------------------------------------------------- secret rotation
def test_an_accepted_secret_lets_brokers_on_both_sides_of_a_rotation_connect(endpoints):
    """During a rotation a broker accepts proofs under the incoming (or outgoing) secret as well as its own; a
    broker that knows only the old secret refuses a dialer already on the new one."""
    old, new = b"o" * 32, b"n" * 32
    a, b = endpoints(1, secret=new), endpoints(2, secret=old, accepted_secrets=[new])
    mesh(a, b)
    connected([a, b])
    assert a.hub.send(2, "meta", "new to old") and pump([a, b], lambda: b.messages, what="a message")
    c, d = endpoints(3, secret=old), endpoints(4, secret=new, accepted_secrets=[old])
    mesh(c, d)
    connected([c, d])
    e, f = endpoints(5, secret=new, handshake_timeout_ms=300), endpoints(6, secret=old)
    mesh(e, f)
    pump([e, f], lambda: f.hub.stats()["handshakes_rejected"] >= 2, what="refused handshakes")
    assert not e.hub.connected_peers() and not f.hub.connected_peers()
