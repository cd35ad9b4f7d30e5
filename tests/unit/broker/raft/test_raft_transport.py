"""RaftHub on loopback: ordered delivery, reconnection, and refusal of every unauthenticated or malformed byte."""
from __future__ import annotations

import marshal
import os
import pickle
import socket
import struct
import threading
import time
import tracemalloc

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from raftbus.broker.raft import hub as wire
from raftbus.broker.raft.hub import RaftHub

SECRET = b"s" * 32
LIMITS = dict(frame_bytes_max=16 << 20, send_buffer_bytes_max=64 << 20, connect_retry_ms=20,
              handshake_timeout_ms=2000)


class Endpoint:
    """A started hub on 127.0.0.1:0 that records what its callbacks saw."""

    def __init__(self, node_id: int, secret: bytes = SECRET, listen: str = "127.0.0.1:0", hub_class=RaftHub,
                 **limits):
        self.node_id = node_id
        self.messages: list[tuple[int, str, object]] = []
        self.events: list[tuple[str, int]] = []
        self.raw_peers: list[RawPeer] = []
        self.hub = hub_class(node_id, listen, {}, secret, on_message=self._on_message,
                           on_peer_connected=lambda peer: self.events.append(("up", peer)),
                           on_peer_disconnected=lambda peer: self.events.append(("down", peer)),
                           **{**LIMITS, **limits})
        self.hub.start()

    def _on_message(self, peer_id: int, channel: str, message) -> None:
        self.messages.append((peer_id, channel, message))

    def from_peer(self, peer_id: int) -> list:
        return [(channel, message) for peer, channel, message in self.messages if peer == peer_id]

    def step(self) -> None:
        self.hub.poll(0.002)
        self.hub.flush()


def mesh(*endpoints: Endpoint) -> None:
    """Tell every endpoint about every other one."""
    for endpoint in endpoints:
        endpoint.hub.set_peers({e.node_id: e.hub.address for e in endpoints if e is not endpoint})


def pump(endpoints, predicate, timeout_s: float = 10.0, what: str = "condition"):
    """Drive every hub until predicate() is truthy; fail with the last value seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        for endpoint in endpoints:
            endpoint.step()
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            stats = {e.node_id: e.hub.stats() for e in endpoints}
            raise AssertionError(f"timed out waiting for {what}; last seen: {last!r}; stats: {stats}")


def connected(endpoints) -> None:
    everyone = {e.node_id for e in endpoints}
    pump(endpoints, lambda: all(e.hub.connected_peers() == everyone - {e.node_id} for e in endpoints),
         what="a full mesh")


@pytest.fixture
def endpoints():
    made: list[Endpoint] = []

    def make(node_id: int, **kwargs) -> Endpoint:
        made.append(Endpoint(node_id, **kwargs))
        return made[-1]

    yield make
    for endpoint in made:
        endpoint.hub.close()
        for peer in endpoint.raw_peers:
            peer.sock.close()


def append_entries(index: int) -> dict:
    return {"type": "append_entries", "term": 3, "commit_index": index - 1, "prevLogIdx": index - 1,
            "prevLogTerm": 3, "entries": [(os.urandom(100), index, 3), (b"", index + 1, 3)], "extra": None,
            "flags": [True, False, 1.5, "x", {"nested": (1, 2)}]}


# ---------------------------------------------------------------------------------------------- a raw peer
class RawPeer:
    """A hand-driven peer with its own socket, to put chosen bytes on a hub's port."""

    def __init__(self, target: Endpoint, node_id: int = 1, secret: bytes = SECRET):
        self.target, self.node_id, self.secret = target, node_id, secret
        host, port = wire.parse_address(target.hub.address)
        self.sock = socket.create_connection((host, port), timeout=5)
        self.sock.setblocking(False)
        self.seq = 0
        target.raw_peers.append(self)

    def handshake(self) -> "RawPeer":
        """Complete a real handshake as dialer `node_id`, leaving session keys for building frames."""
        transcript = self.send_hello_and_proof()
        assert self.read(wire.PROOF_BYTES) == wire.handshake_proof(self.secret, transcript, wire.ACCEPTOR)
        self.mac = wire.session_mac(self.secret, transcript, wire.DIALER)
        self.key = wire.session_key(self.secret, transcript, wire.DIALER)
        self.recv_key = wire.session_key(self.secret, transcript, wire.ACCEPTOR)
        pump([self.target], lambda: self.node_id in self.target.hub.connected_peers(), what="raw peer accepted")
        return self

    def send_hello_and_proof(self) -> bytes:
        """Say hello as `node_id` and send a correct proof; returns the transcript."""
        nonce = os.urandom(wire.NONCE_BYTES)
        self.sock.sendall(wire.hello_bytes(self.node_id, nonce))
        hub_id, hub_nonce = wire.parse_hello(self.read(wire.HELLO.size))
        transcript = wire.transcript(nonce, hub_nonce, self.node_id, hub_id)
        try:
            self.send(wire.handshake_proof(self.secret, transcript, wire.DIALER))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the hub may already have hung up
        return transcript

    def read(self, count: int) -> bytes:
        data = bytearray()

        def arrived():
            try:
                data.extend(self.sock.recv(count - len(data)))
            except BlockingIOError:
                pass
            return len(data) == count
        pump([self.target], arrived, what=f"{count} bytes from the hub")
        return bytes(data)

    def frame(self, payload: bytes, seq: int | None = None, gcm: bool = False) -> bytes:
        self.seq = self.seq + 1 if seq is None else seq
        if gcm:
            header, tag = wire.seal_gcm(AESGCM(self.key), self.key, self.seq, [payload])
        else:
            header, tag = wire.seal(self.mac, self.seq, [payload])
        return header + payload + tag

    def read_frame(self) -> tuple[int, bytes, bytes]:
        """The next frame from the hub: (sequence field, payload, tag), unchecked."""
        (length,) = struct.unpack(">I", self.read(4))
        body = self.read(length)
        (field,) = struct.unpack_from(">Q", body)
        return field, body[8:-wire.TAG_BYTES], body[-wire.TAG_BYTES:]

    def send(self, data: bytes) -> None:
        self.sock.setblocking(True)
        self.sock.sendall(data)
        self.sock.setblocking(False)

    def closed_by_hub(self) -> bool:
        try:
            while self.sock.recv(65536):
                pass
            return True
        except BlockingIOError:
            return False
        except ConnectionResetError:
            return True


def record(channel: str, message) -> bytes:
    data = marshal.dumps((channel, message))
    return struct.pack(">I", len(data)) + data


class RunsCommand:
    """Unpickling this would run a shell command that creates a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


# ---------------------------------------------------------------------------------------------- delivery
def test_two_hubs_exchange_messages_in_order_both_ways(endpoints):
    """Two hubs deliver small dicts, pysyncobj-shaped dicts and multi-megabyte bytes both ways, in order."""
    a, b = endpoints(1), endpoints(2)
    mesh(a, b)
    connected([a, b])
    big = os.urandom(6 << 20)
    sent = {a: [], b: []}
    for i in range(30):
        for sender, receiver in ((a, b), (b, a)):
            message = big if i % 10 == 5 else append_entries(i) if i % 2 else {"type": "ping", "n": i}
            channel = f"p{i % 3}.0"
            assert sender.hub.send(receiver.node_id, channel, message)
            sent[sender].append((channel, message))
        if i % 4 == 0:
            a.step(), b.step()
    pump([a, b], lambda: (len(a.messages), len(b.messages)) == (30, 30), what="60 messages")
    assert b.from_peer(1) == sent[a]
    assert a.from_peer(2) == sent[b]
    assert a.events == [("up", 2)] and b.events == [("up", 1)]


def test_three_hubs_form_one_connection_per_pair(endpoints):
    """Three hubs connect pairwise once (lower id dials) and deliver per-sender order on several channels."""
    hubs = [endpoints(n) for n in (1, 2, 3)]
    mesh(*hubs)
    connected(hubs)
    for i in range(50):
        for sender in hubs:
            for receiver in hubs:
                if receiver is not sender:
                    assert sender.hub.send(receiver.node_id, f"ch{i % 4}", [sender.node_id, i, b"x" * i])
    pump(hubs, lambda: all(len(e.messages) == 100 for e in hubs), what="100 messages at each hub")
    for receiver in hubs:
        for sender in hubs:
            if sender is not receiver:
                assert receiver.from_peer(sender.node_id) == [(f"ch{i % 4}", [sender.node_id, i, b"x" * i])
                                                              for i in range(50)]
    assert [e.hub.stats()["handshakes_ok"] for e in hubs] == [2, 2, 2]


def test_reconnects_after_a_peer_restarts_on_the_same_port(endpoints):
    """When a peer closes and a new hub starts on its port, the pair reconnects and messages flow again."""
    a, b = endpoints(1), endpoints(2)
    mesh(a, b)
    connected([a, b])
    address = b.hub.address
    b.hub.close()
    pump([a], lambda: ("down", 2) in a.events, what="node 1 to see node 2 go")
    b2 = endpoints(2, listen=address)
    b2.hub.set_peers({1: a.hub.address})
    connected([a, b2])
    assert a.events == [("up", 2), ("down", 2), ("up", 2)]
    assert a.hub.send(2, "meta", {"after": "restart"}) and b2.hub.send(1, "meta", b"back")
    pump([a, b2], lambda: a.messages and b2.messages, what="messages after the restart")
    assert b2.messages == [(1, "meta", {"after": "restart"})] and a.messages == [(2, "meta", b"back")]


def test_send_to_an_unconnected_peer_returns_false(endpoints):
    """send() answers False for a peer that is not connected instead of queueing without end."""
    a = endpoints(1)
    assert a.hub.send(2, "meta", {"x": 1}) is False


def test_wakeup_from_another_thread_ends_a_long_poll(endpoints):
    """wakeup() from another thread makes a long poll return promptly."""
    a = endpoints(1)
    timer = threading.Timer(0.05, a.hub.wakeup)
    timer.start()
    started = time.monotonic()
    a.hub.poll(10.0)
    timer.join()
    assert time.monotonic() - started < 5.0


def test_removing_a_peer_closes_its_connection(endpoints):
    """set_peers without a connected peer closes that connection and reports the peer gone."""
    a, b = endpoints(1), endpoints(2)
    mesh(a, b)
    connected([a, b])
    a.hub.set_peers({})
    assert a.hub.connected_peers() == set() and a.events == [("up", 2), ("down", 2)]
    pump([a, b], lambda: ("down", 1) in b.events, what="node 2 to see node 1 go")


def test_a_newer_authenticated_connection_replaces_the_old_one(endpoints):
    """A peer that reconnects (say after a restart the acceptor has not noticed) replaces its old connection;
    a stranger claiming the same id does not disturb it."""
    b = endpoints(2)
    b.hub.set_peers({1: "127.0.0.1:1"})
    first = RawPeer(b).handshake()
    stranger = RawPeer(b, secret=b"w" * 32)
    stranger.send_hello_and_proof()
    pump([b], stranger.closed_by_hub, what="the stranger to be closed")
    assert b.events == [("up", 1)]
    second = RawPeer(b).handshake()
    pump([b], first.closed_by_hub, what="the old connection to be closed")
    assert b.events == [("up", 1), ("down", 1), ("up", 1)]
    second.send(second.frame(record("meta", "from the new connection")))
    pump([b], lambda: b.messages, what="a message on the new connection")
    assert b.messages == [(1, "meta", "from the new connection")]


# ---------------------------------------------------------------------------------------------- refusals
def test_wrong_secret_never_connects(endpoints):
    """A hub with another secret is refused on every attempt and no message or callback gets through."""
    a, b = endpoints(1, secret=b"x" * 32), endpoints(2)
    mesh(a, b)
    pump([a, b], lambda: b.hub.stats()["handshakes_rejected"] >= 3, what="three refused handshakes")
    assert not a.hub.connected_peers() and not b.hub.connected_peers()
    assert a.hub.send(2, "meta", b"x") is False
    assert a.events == b.events == [] and a.messages == b.messages == []


def test_unknown_node_id_is_refused(endpoints):
    """A hub whose id is not in the acceptor's peer table is refused."""
    a, b = endpoints(1), endpoints(2)
    a.hub.set_peers({2: b.hub.address})
    b.hub.set_peers({3: "127.0.0.1:1"})
    pump([a, b], lambda: b.hub.stats()["handshakes_rejected"] >= 2, what="refused handshakes")
    assert not a.hub.connected_peers() and not b.hub.connected_peers() and b.events == []


def test_a_dialer_with_the_higher_id_is_refused(endpoints):
    """Only the lower id may dial: a correct handshake from a higher id is still refused."""
    b = endpoints(2)
    b.hub.set_peers({3: "127.0.0.1:1"})
    peer = RawPeer(b, node_id=3)
    peer.send_hello_and_proof()
    pump([b], peer.closed_by_hub, timeout_s=1.0, what="the wrong-direction dialer to be closed")
    assert b.hub.stats()["handshakes_rejected"] == 1 and b.events == []


def test_garbage_is_refused_and_real_peers_keep_working(endpoints, tmp_path):
    """Random bytes, a bare pickle and a stalled connection are closed while the real pair keeps talking."""
    a, b = endpoints(1), endpoints(2, handshake_timeout_ms=300)
    mesh(a, b)
    connected([a, b])
    exploit = pickle.dumps(RunsCommand(tmp_path / "ran"))
    attacks = [RawPeer(b) for _ in range(3)]
    attacks[0].send(os.urandom(4096))
    attacks[1].send(struct.pack(">I", len(exploit)) + exploit)
    attacks[2].send(wire.MAGIC)  # then silence: must time out
    pump([a, b], lambda: all(p.closed_by_hub() for p in attacks), what="every attacker closed")
    assert b.hub.stats()["handshakes_rejected"] == 3
    assert a.hub.send(2, "meta", "still here")
    pump([a, b], lambda: b.messages, what="a message after the attacks")
    assert b.messages == [(1, "meta", "still here")] and b.events == [("up", 1)]
    assert not (tmp_path / "ran").exists()


def test_forged_frame_closes_the_connection_and_is_not_delivered(endpoints):
    """After a real handshake, a frame with a bad tag drops the connection and none of it is delivered."""
    b = endpoints(2)
    b.hub.set_peers({1: "127.0.0.1:1"})
    peer = RawPeer(b).handshake()
    peer.send(peer.frame(record("meta", "genuine")))
    pump([b], lambda: b.messages, what="the genuine frame")
    forged = bytearray(peer.frame(record("meta", "forged")))
    forged[-1] ^= 1
    peer.send(bytes(forged))
    pump([b], peer.closed_by_hub, what="the forger to be closed")
    assert b.messages == [(1, "meta", "genuine")]
    assert b.events == [("up", 1), ("down", 1)] and b.hub.stats()["frames_rejected"] == 1


def test_replayed_frame_closes_the_connection(endpoints):
    """The same captured frame sent twice is delivered once; the replay drops the connection."""
    b = endpoints(2)
    b.hub.set_peers({1: "127.0.0.1:1"})
    peer = RawPeer(b).handshake()
    captured = peer.frame(record("meta", "once"))
    peer.send(captured)
    pump([b], lambda: b.messages, what="the first copy")
    peer.send(captured)
    pump([b], peer.closed_by_hub, what="the replayer to be closed")
    assert b.messages == [(1, "meta", "once")] and b.hub.stats()["frames_rejected"] == 1


def test_oversize_frame_length_is_refused_without_allocating_it(endpoints):
    """A frame length above frame_bytes_max closes the connection before any buffer of that size exists."""
    b = endpoints(2, frame_bytes_max=1 << 20)
    b.hub.set_peers({1: "127.0.0.1:1"})
    peer = RawPeer(b).handshake()
    tracemalloc.start()
    try:
        peer.send(struct.pack(">IQ", 0x7FFFFFF0, 1) + os.urandom(256))
        pump([b], peer.closed_by_hub, what="the oversize frame's sender to be closed")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak} bytes while refusing a 2 GiB frame"
    assert b.hub.stats()["frames_rejected"] == 1 and b.messages == []


def test_pickled_code_is_never_executed(endpoints, tmp_path):
    """A pickle calling os.system, raw on the port or inside a correctly tagged frame, and a marshalled code
    object, are refused without running anything."""
    marker = tmp_path / "code-ran"
    exploit = pickle.dumps(RunsCommand(marker))
    code = compile(f"open({str(marker)!r}, 'w').close()", "exploit", "exec")
    b = endpoints(2)
    b.hub.set_peers({1: "127.0.0.1:1"})
    raw = RawPeer(b)
    raw.send(exploit)
    bodies = [exploit, struct.pack(">I", len(exploit)) + exploit, record("meta", code),
              record("meta", {"type": "append_entries", "entries": [code]})]
    for body in bodies:
        peer = RawPeer(b).handshake()
        peer.send(peer.frame(body))
        pump([b], peer.closed_by_hub, what="the frame carrying code to be refused")
    pump([b], raw.closed_by_hub, what="the raw pickle to be refused")
    assert not marker.exists(), "a payload on the Raft port was executed"
    assert b.messages == [] and b.hub.stats()["frames_rejected"] == len(bodies)


# ---------------------------------------------------------------------------------------------- limits
def test_message_above_the_frame_limit_raises(endpoints):
    """send() refuses a message whose frame would exceed frame_bytes_max, and unencodable messages."""
    a, b = endpoints(1, frame_bytes_max=1 << 20), endpoints(2)
    mesh(a, b)
    connected([a, b])
    with pytest.raises(ValueError):
        a.hub.send(2, "meta", b"x" * (1 << 20))
    with pytest.raises(ValueError):
        a.hub.send(2, "meta", {"not plain": object()})
    assert a.hub.send(2, "meta", b"x" * ((1 << 20) - 100))
    pump([a, b], lambda: b.messages, what="the largest allowed message")


def test_many_messages_are_cut_into_frames_under_the_limit(endpoints):
    """Messages queued between flushes that together exceed frame_bytes_max leave as several frames."""
    a, b = endpoints(1, frame_bytes_max=1 << 20), endpoints(2, frame_bytes_max=1 << 20)
    mesh(a, b)
    connected([a, b])
    payloads = [os.urandom(300_000) for _ in range(10)] + [b"tail"]
    for payload in payloads:
        assert a.hub.send(2, "p0.0", payload)
    pump([a, b], lambda: len(b.messages) == len(payloads), what="all messages")
    assert [m for _, _, m in b.messages] == payloads
    assert a.hub.stats()["frames_out"] >= 4 and b.hub.stats()["frames_rejected"] == 0


def test_send_buffer_overflow_drops_the_connection(endpoints):
    """A peer that stops reading is disconnected once its send buffer passes send_buffer_bytes_max."""
    a, b = endpoints(1, send_buffer_bytes_max=2 << 20), endpoints(2)
    mesh(a, b)
    connected([a, b])
    chunk = b"x" * (256 << 10)
    for _ in range(400):  # b no longer polls; the kernel buffers fill, then a's own buffer
        if not a.hub.send(2, "p0.0", chunk):
            break
        a.hub.flush()
    assert 2 not in a.hub.connected_peers()
    assert a.events == [("up", 2), ("down", 2)] and a.hub.stats()["send_buffer_overflows"] == 1


# ---------------------------------------------------------------------------------------------- frame tags
class FirstVersionHub(RaftHub):
    """A hub as brokers before the GCM offer were: BLAKE2b tags only, the offer delivered as an ordinary record."""

    OFFERS_GCM_TAGS = False


def exchange(a: Endpoint, b: Endpoint, rounds: int = 12) -> None:
    """Small, multi-record and multi-megabyte messages both ways; every one delivered in order."""
    big = os.urandom(3 << 20)
    sent = {a: [], b: []}
    for i in range(rounds):
        for sender, receiver in ((a, b), (b, a)):
            for message in ([big] if i % 5 == 2 else [append_entries(i), {"n": i}, os.urandom(70_000)]):
                assert sender.hub.send(receiver.node_id, f"p{i % 3}.0", message)
                sent[sender].append((f"p{i % 3}.0", message))
        a.step(), b.step()
    pump([a, b], lambda: len(b.from_peer(a.node_id)) >= len(sent[a]) and len(a.from_peer(b.node_id)) >= len(sent[b]),
         what="every message")
    assert [r for r in b.from_peer(a.node_id) if r[0] != wire.HUB_CHANNEL] == sent[a]
    assert [r for r in a.from_peer(b.node_id) if r[0] != wire.HUB_CHANNEL] == sent[b]


def test_two_current_hubs_tag_their_frames_with_gcm_after_the_offer(endpoints):
    """Hubs that both offer GCM tags switch to them and deliver everything (one-part, joined and streamed
    payloads); the offer itself is never delivered as a message."""
    a, b = endpoints(1), endpoints(2)
    mesh(a, b)
    connected([a, b])
    pump([a, b], lambda: a.hub.stats()["peers_gcm_tagged"] == b.hub.stats()["peers_gcm_tagged"] == 1,
         what="both sides sending GCM-tagged frames")
    exchange(a, b)
    assert not [m for m in a.messages + b.messages if m[1] == wire.HUB_CHANNEL]
    assert a.hub.stats()["frames_rejected"] == b.hub.stats()["frames_rejected"] == 0


def test_a_hub_of_the_first_version_keeps_getting_blake2b_frames(endpoints):
    """A peer that never offers GCM (a broker from before the offer) is sent BLAKE2b frames both ways, gets the offer
    as a record for no group (which such a broker drops), and every message is delivered: brokers of both kinds stay
    connected through a rolling upgrade, in either dialing direction."""
    for old_id, new_id in ((1, 2), (4, 3)):
        old, new = endpoints(old_id, hub_class=FirstVersionHub), endpoints(new_id)
        mesh(old, new)
        connected([old, new])
        exchange(old, new)
        assert old.from_peer(new_id)[0] == (wire.HUB_CHANNEL, wire.FRAME_TAGS_OFFER)
        assert old.hub.stats()["peers_gcm_tagged"] == new.hub.stats()["peers_gcm_tagged"] == 0
        assert old.hub.stats()["frames_rejected"] == new.hub.stats()["frames_rejected"] == 0


def test_frames_switch_to_gcm_once_the_offer_arrived(endpoints):
    """Read off the wire: the hub's first frame (its offer) is BLAKE2b-tagged; after the peer's offer every frame
    carries the GCM flag in its sequence field, continues the same sequence and verifies as GMAC of its payload."""
    b = endpoints(2)
    b.hub.set_peers({1: "127.0.0.1:1"})
    peer = RawPeer(b).handshake()
    field, payload, tag = peer.read_frame()
    assert field == 1 and wire.decode_records(payload) == [(wire.HUB_CHANNEL, wire.FRAME_TAGS_OFFER)]
    mac = wire.blake2b_mac(peer.recv_key)
    mac.update(struct.pack(">Q", field) + payload)
    assert mac.digest() == tag
    peer.send(peer.frame(record(wire.HUB_CHANNEL, wire.FRAME_TAGS_OFFER)))
    pump([b], lambda: b.hub.stats()["peers_gcm_tagged"] == 1, what="the offer taken")
    b.hub.send(1, "p0.0", {"n": 1})
    b.hub.flush()
    field, payload, tag = peer.read_frame()
    assert field == 2 | wire.GCM_FRAME and wire.decode_records(payload) == [("p0.0", {"n": 1})]
    AESGCM(peer.recv_key).decrypt(bytes(4) + struct.pack(">Q", field), tag, payload)  # raises if the tag is wrong


def test_gcm_frames_are_accepted_and_a_forged_or_replayed_one_closes_the_connection(endpoints):
    """A peer's GCM-tagged frames are delivered; one with a flipped tag bit, or a replay of an earlier one, closes the
    connection and is not delivered; so does a GCM frame whose sequence field was turned into a BLAKE2b one."""
    for attack in ("forged", "replayed", "flag cleared"):
        b = endpoints(2)
        b.hub.set_peers({1: "127.0.0.1:1"})
        peer = RawPeer(b).handshake()
        captured = peer.frame(record("meta", "genuine"), gcm=True)
        peer.send(captured)
        pump([b], lambda: b.messages, what="the genuine GCM frame")
        if attack == "forged":
            bad = bytearray(peer.frame(record("meta", "forged"), gcm=True))
            bad[-1] ^= 1
        elif attack == "replayed":
            bad = bytearray(captured)
        else:
            bad = bytearray(peer.frame(record("meta", "relabelled"), gcm=True))
            bad[4] &= 0x7F
        peer.send(bytes(bad))
        pump([b], peer.closed_by_hub, what=f"the {attack} frame to close the connection")
        assert b.messages == [(1, "meta", "genuine")], attack
        assert b.hub.stats()["frames_rejected"] == 1, attack


def _read_unit(conn, size: int) -> None:
    """What the hub does for one unit of `size` bytes: room for it, its bytes arrive, it is taken."""
    from raftbus.broker.raft import hub

    conn.need = size
    conn.make_room()
    conn.rend += size
    assert conn.take() is not None
    conn.recv_seq += 1
    conn.need = hub.LENGTH.size


def test_the_receive_buffer_stays_grown_while_large_frames_keep_arriving_and_shrinks_after():
    """Goal: a connection that keeps receiving frames larger than RECV_BUFFER_BYTES, with many small frames
    between them, keeps its grown buffer (no new multi-MB buffer per large frame); once large frames stop, it
    gives the memory back."""
    from raftbus.broker.raft import hub

    a, b = socket.socketpair()
    try:
        conn = hub._Connection(a, dialer=False, peer_id=2, deadline=0.0)
        large = 3 * hub.RECV_BUFFER_BYTES
        _read_unit(conn, large)
        grown = conn.rbuf
        assert len(grown) >= large
        for _ in range(5):
            for _ in range(1000):  # heartbeats and acknowledgements between the large appends
                _read_unit(conn, 64)
            _read_unit(conn, large)
            assert conn.rbuf is grown
        for _ in range(hub.RECV_BUFFER_SHRINK_AFTER_FRAMES + 1):
            _read_unit(conn, 64)
        assert len(conn.rbuf) == hub.RECV_BUFFER_BYTES
    finally:
        a.close()
        b.close()
