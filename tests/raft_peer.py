"""A hand-driven Raft peer for tests: dials a broker's Raft port as a known node id, with the cluster key (and a
TLS certificate when the port wants one), then sends and reads chosen (channel, message) records.

It speaks the real protocol (broker/raft/hub.py), so whatever it sends reaches the Raft core exactly as a genuine
peer's messages would: the tests use it to forge what only a holder of the cluster secret could send.
"""
from __future__ import annotations

import marshal
import os
import socket
import ssl
import struct
import time

from raftbus.broker.raft import hub as wire


class RaftPeer:
    def __init__(self, port: int, node_id: int, key: bytes, *, tls: ssl.SSLContext | None = None,
                 host: str = "127.0.0.1", timeout_s: float = 10.0):
        self.node_id, self.key = node_id, key
        sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock = tls.wrap_socket(sock, server_hostname=host) if tls is not None else sock
        self.buffer = bytearray()
        self.send_seq = self.recv_seq = 0

    # ------------------------------------------------------------------ handshake
    def handshake(self) -> "RaftPeer":
        nonce = os.urandom(wire.NONCE_BYTES)
        self.sock.sendall(wire.hello_bytes(self.node_id, nonce))
        broker_id, broker_nonce = wire.parse_hello(self.read_exact(wire.HELLO.size))
        transcript = wire.transcript(nonce, broker_nonce, self.node_id, broker_id)
        self.sock.sendall(wire.handshake_proof(self.key, transcript, wire.DIALER))
        proof = self.read_exact(wire.PROOF_BYTES)
        assert proof == wire.handshake_proof(self.key, transcript, wire.ACCEPTOR), "the broker's proof is wrong"
        self.send_mac = wire.session_mac(self.key, transcript, wire.DIALER)
        self.recv_mac = wire.session_mac(self.key, transcript, wire.ACCEPTOR)
        return self

    # ------------------------------------------------------------------ frames
    def send(self, *records: tuple[str, object]) -> None:
        """One authentic frame carrying these (channel, message) records."""
        parts = []
        for record in records:
            data = marshal.dumps(record)
            parts.append(struct.pack(">I", len(data)) + data)
        self.send_seq += 1
        header, tag = wire.seal(self.send_mac, self.send_seq, parts)
        self.sock.sendall(header + b"".join(parts) + tag)

    def receive(self, timeout_s: float = 10.0) -> list[tuple[str, object]]:
        """The records of the next frame from the broker (its tag checked)."""
        self.sock.settimeout(timeout_s)
        (length,) = struct.unpack(">I", self.read_exact(4))
        body = self.read_exact(length)
        mac = self.recv_mac.copy()
        mac.update(body[:-wire.TAG_BYTES])
        assert mac.digest() == body[-wire.TAG_BYTES:], "a frame from the broker with a bad tag"
        self.recv_seq += 1
        return wire.decode_records(body[8:-wire.TAG_BYTES])

    def receive_until(self, predicate, timeout_s: float = 30.0):
        """Read frames until predicate(channel, message) returns a truthy value; return it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for channel, message in self.receive(max(0.1, deadline - time.monotonic())):
                found = predicate(channel, message)
                if found:
                    return found
        raise AssertionError(f"no matching message from the broker within {timeout_s} s")

    def read_exact(self, count: int) -> bytes:
        while len(self.buffer) < count:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the broker")
            self.buffer.extend(data)
        out = bytes(self.buffer[:count])
        del self.buffer[:count]
        return out

    def closed_by_broker(self, timeout_s: float = 10.0) -> bool:
        self.sock.settimeout(timeout_s)
        try:
            while self.sock.recv(65536):
                pass
        except (ConnectionResetError, ssl.SSLError):
            pass
        return True

    def close(self) -> None:
        self.sock.close()
