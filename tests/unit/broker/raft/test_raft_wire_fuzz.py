"""Property-based fuzz tests of the Raft port on a live hub (Hypothesis): mutated handshakes are refused, and
correctly tagged frames whose payloads are mutated deliver plain (channel, message) records or close the
connection; either way the hub keeps serving its real peer. Parsing a hello is fuzzed on its own too."""
from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftbus.broker.raft import hub as wire
from raftbus.broker.raft import plain_marshal
from tests.fuzzing import FUZZ, bounded, mutated
from tests.unit.broker.raft.test_raft_transport import Endpoint, RawPeer, SECRET, append_entries, mesh, pump

PAYLOAD = b"".join(struct.pack(">I", len(r)) + r for r in (
    plain_marshal.dumps(("p0.0", append_entries(5))), plain_marshal.dumps(("meta", {"type": "ping", "n": 1}))))
FEW = settings(FUZZ, max_examples=30)  # each example is a connection to a live hub
HELLO_AND_PROOF = wire.hello_bytes(1, bytes(range(32))) + wire.handshake_proof(SECRET, b"t" * 72, wire.DIALER)


@pytest.fixture(scope="module")
def hubs():
    a, b = Endpoint(1), Endpoint(2, handshake_timeout_ms=200)
    mesh(a, b)
    yield a, b
    for endpoint in (a, b):
        endpoint.hub.close()
        for peer in endpoint.raw_peers:
            peer.sock.close()


def still_serving(a: Endpoint, b: Endpoint) -> None:
    """The real peer (a, node 1) connects to b, if the raw peer displaced it, and delivers a message."""
    count = len(b.from_peer(1))
    pump([a, b], lambda: 1 in b.hub.connected_peers() and a.hub.send(2, "meta", "real"), what="the real peer")
    pump([a, b], lambda: len(b.from_peer(1)) > count, what="a message of the real peer")


@FUZZ
@given(st.binary(min_size=wire.HELLO.size, max_size=wire.HELLO.size) | mutated(HELLO_AND_PROOF).map(
    lambda d: d[:wire.HELLO.size].ljust(wire.HELLO.size, b"\0")))
def test_parsing_a_hello_gives_an_id_and_nonce_or_a_protocol_error(data):
    """Any 43 bytes parse as a hello with the magic, or raise ProtocolError."""
    bounded(wire.parse_hello, data, (wire.ProtocolError,))


@FEW
@given(mutated(HELLO_AND_PROOF))
def test_mutated_handshakes_are_refused_and_the_hub_keeps_serving(hubs, data):
    """A mutated hello and proof never authenticate; the hub closes it and its real peer keeps delivering."""
    a, b = hubs
    rejected = b.hub.stats()["handshakes_rejected"]
    peer = RawPeer(b)
    try:
        peer.send(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    pump([a, b], peer.closed_by_hub, what="the mutated handshake closed")
    assert b.hub.stats()["handshakes_rejected"] > rejected
    peer.sock.close()
    assert b.hub.connected_peers() <= {1}
    still_serving(a, b)


@FEW
@given(mutated(PAYLOAD))
def test_tagged_frames_with_mutated_payloads_deliver_plain_records_or_close(hubs, payload):
    """An authenticated peer's correctly tagged frame with a mutated payload delivers (channel, message) records
    of plain data, or closes the connection without delivering any of it; then the real peer delivers again."""
    a, b = hubs
    before = len(b.messages)
    peer = RawPeer(b).handshake()
    peer.send(peer.frame(payload))
    try:
        records = wire.decode_records(payload)
    except wire.ProtocolError:
        pump([a, b], peer.closed_by_hub, what="the connection closed")
        assert len(b.messages) == before
    else:
        pump([a, b], lambda: len(b.messages) >= before + len(records), what="the records delivered")
        assert [(channel, message) for _, channel, message in b.messages[before:]] == records
    peer.sock.close()
    still_serving(a, b)
