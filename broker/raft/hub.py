"""The broker's Raft transport: one authenticated TCP connection per broker pair, shared by every Raft group.

Nothing a peer sends is unpickled or decompressed, and nothing is decoded before it is authenticated:

- **Optional mutual TLS underneath.** With `tls` set, each TCP connection first completes a TLS 1.3 handshake in
  which both sides present a certificate signed by the configured CA; the hello, proofs and frames below then
  travel inside it unchanged (see docs/security.md, "Raft port").
- **Authentication before anything else.** Both sides exchange a hello (magic, node id, fresh nonce); the DIALER
  then proves knowledge of the cluster key with HMAC-SHA256 over both nonces and both ids, and only once that
  proof checks out does the acceptor send its own. A stranger who dials therefore learns nothing it could test
  secret guesses against offline. Unknown ids, a dialer with the higher id, bad magic, a wrong proof or a slow
  handshake close the connection; no callback ever sees a byte from an unauthenticated connection.
  While a secret is being rotated, an acceptor also takes proofs under `accepted_secrets` (never used to dial)
  and answers under the key the dialer proved.
- **Authenticated frames.** Every frame carries a per-direction sequence number and a 16-byte tag under a session
  key derived from the secret and both nonces: a forged, replayed or reordered frame closes the connection and
  none of it is decoded. Frames are not encrypted: bind the Raft port to a private address. The first frames of
  a connection are tagged with keyed BLAKE2b, which every raftbus broker verifies; each side offers AES-256-GCM
  tags at once (a `~hub` record, the first it sends), and a side that received the offer tags the rest of its
  frames with GMAC (AES-GCM over no plaintext, the payload as associated data, the sequence number as nonce),
  cheaper per byte where the CPU has AES and carry-less multiply instructions. A peer that never offers
  (a broker from before the offer, which drops the record as a message for no group) keeps getting BLAKE2b
  frames, so brokers of both kinds stay connected through a rolling upgrade.
- **No pickle, no zlib.** Messages are `marshal`-encoded plain data (format version 2, no references); after the
  tag checks out, each record's bytes are scanned before marshal builds anything (plain_marshal.py): only None,
  bool, int, float, str, bytes, list, tuple and dict (marshal can carry code objects; those are refused), and no
  count or length the record's bytes cannot hold, so a record never makes the broker allocate more than a small
  multiple of its size.
- **Bounds.** A frame length above `frame_bytes_max` closes the connection before its body is read; a peer
  whose send buffer passes `send_buffer_bytes_max` is disconnected rather than buffered without limit;
  pending handshakes are bounded in total and per source address (`handshakes_pending_max`,
  `handshakes_pending_per_address_max`), and so is their duration.

The broker with the lower id dials the higher one, so each pair has one connection (a newer authenticated
connection from the same peer replaces the old one: the peer has restarted or given up on it). All work runs
on the caller's thread (the Raft loop) inside `poll` and `flush`; only `wakeup` may be called from others.
Messages sent to a peer between two flushes leave as one frame when they fit.

Wire format (integers big-endian):
    hello   = b"RBRAFT1" + node id (u32) + nonce (32 bytes)                    both sides, on connect
    proof   = HMAC-SHA256(secret, b"raftbus-hs" + transcript + side)             side b"D" dialer, b"A" acceptor;
                                                                                 the dialer's is sent first
    key     = HMAC-SHA256(secret, b"raftbus-key" + transcript + side)            for frames sent by that side
    transcript = dialer nonce + acceptor nonce + dialer id (u32) + acceptor id (u32)
    frame   = length (u32, of what follows) + sequence (u64, 1, 2, ...) + payload + tag (16 bytes)
    tag     = BLAKE2b(key=key, digest_size=16) over sequence + payload                 sequence's top bit clear
            | AES-256-GCM(key).encrypt(nonce=4 zero bytes + sequence, plaintext=b"",
                                       associated data=payload)                       sequence's top bit set
    payload = records, each length (u32) + marshal.dumps((channel, message), 2)
    offer   = the record ("~hub", ("frame-tags", "aes-256-gcm")), sent first on a new connection
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import logging
import os
import selectors
import socket
import ssl
import struct
from collections import deque
from itertools import islice
from typing import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from raftbus.broker.raft import plain_marshal
from raftbus.broker.raft.clock import Clock, monotonic_s

log = logging.getLogger(__name__)

MAGIC = b"RBRAFT1"
NONCE_BYTES = 32
PROOF_BYTES = 32
TAG_BYTES = 16
HELLO = struct.Struct(">7sI32s")
LENGTH = struct.Struct(">I")
HEADER = struct.Struct(">IQ")  # frame length, sequence number
FRAME_OVERHEAD = 8 + TAG_BYTES  # sequence + tag, counted in the frame length
DIALER, ACCEPTOR = b"D", b"A"
HUB_CHANNEL = "~hub"  # records the hubs exchange between themselves, never delivered
GCM_TAGS = "aes-256-gcm"
FRAME_TAGS_OFFER = ("frame-tags", GCM_TAGS)  # "I verify GCM-tagged frames": send me those
GCM_FRAME = 1 << 63  # set in a frame's sequence field when its tag is GCM's
_NONCE_PAD = bytes(4)  # a GCM nonce is 12 bytes: 4 zero bytes and the 8-byte sequence field
GCM_JOIN_BYTES_MAX = 64 << 10  # a multi-part payload up to this size is joined for the one-shot tag

RECV_BUFFER_BYTES = 1 << 20
# A connection's receive buffer, grown for a frame larger than RECV_BUFFER_BYTES, goes back to that size once this
# many frames in a row held no larger one. Under load a leader's large appends come with many small frames between
# them (acknowledgements, heartbeats of other groups): a short count would free and reallocate the buffer for
# nearly every large frame.
RECV_BUFFER_SHRINK_AFTER_FRAMES = 4096
RECV_BYTES_PER_POLL_MAX = 16 << 20  # per connection, so one busy peer cannot starve the others
ACCEPTS_PER_POLL_MAX = 64
SEND_PARTS_PER_CALL_MAX = 512
TLS_WRITE_BYTES = 256 << 10  # bytes handed to one SSL write (TLS sockets have no sendmsg)
COALESCE_BYTES = 16 << 10  # parts smaller than this are joined before sending


class ProtocolError(Exception):
    """Bytes from a peer that break the protocol; the connection is closed."""


# ---------------------------------------------------------------------------------------------- pure protocol
def hello_bytes(node_id: int, nonce: bytes) -> bytes:
    return HELLO.pack(MAGIC, node_id, nonce)


def parse_hello(data) -> tuple[int, bytes]:
    magic, node_id, nonce = HELLO.unpack(data)
    if magic != MAGIC:
        raise ProtocolError("not a raftbus Raft hello")
    return node_id, nonce


def transcript(dialer_nonce: bytes, acceptor_nonce: bytes, dialer_id: int, acceptor_id: int) -> bytes:
    return dialer_nonce + acceptor_nonce + struct.pack(">II", dialer_id, acceptor_id)


def handshake_proof(secret: bytes, transcript_bytes: bytes, side: bytes) -> bytes:
    return hmac.digest(secret, b"raftbus-hs" + transcript_bytes + side, "sha256")


def session_key(secret: bytes, transcript_bytes: bytes, side: bytes) -> bytes:
    """The 32-byte key of the frames sent by `side` on this connection."""
    return hmac.digest(secret, b"raftbus-key" + transcript_bytes + side, "sha256")


def session_mac(secret: bytes, transcript_bytes: bytes, side: bytes):
    """A keyed BLAKE2b prototype for frames sent by `side`; copy it per frame."""
    return blake2b_mac(session_key(secret, transcript_bytes, side))


def blake2b_mac(key: bytes):
    return hashlib.blake2b(key=key, digest_size=TAG_BYTES)


def seal(mac, seq: int, parts) -> tuple[bytes, bytes]:
    """Header and BLAKE2b tag of the frame whose payload is the concatenation of `parts`."""
    header = HEADER.pack(FRAME_OVERHEAD + sum(map(len, parts)), seq)
    h = mac.copy()
    h.update(header[4:])
    for part in parts:
        h.update(part)
    return header, h.digest()


def seal_gcm(aead: AESGCM, key: bytes, seq: int, parts) -> tuple[bytes, bytes]:
    """Header and GMAC tag of the frame whose payload is the concatenation of `parts` (`aead` is AESGCM(key)).
    The sequence field carries GCM_FRAME and is the nonce: one key per direction and connection, each sequence
    number used once."""
    field = seq | GCM_FRAME
    header = HEADER.pack(FRAME_OVERHEAD + sum(map(len, parts)), field)
    nonce = _NONCE_PAD + header[4:]
    if len(parts) == 1:
        return header, aead.encrypt(nonce, b"", parts[0])
    if sum(map(len, parts)) <= GCM_JOIN_BYTES_MAX:
        return header, aead.encrypt(nonce, b"", b"".join(parts))
    encryptor = Cipher(algorithms.AES(key), modes.GCM(nonce)).encryptor()  # large parts: no copy
    for part in parts:
        encryptor.authenticate_additional_data(part)
    encryptor.finalize()
    return header, encryptor.tag


def check_tag(blake2b_proto, aead: AESGCM, body) -> int:
    """The sequence number of a frame `body` (sequence field, payload, tag) whose tag checks out under the
    algorithm its sequence field names; ProtocolError otherwise."""
    (field,) = struct.unpack_from(">Q", body)
    tag = bytes(body[-TAG_BYTES:])
    if field & GCM_FRAME:
        try:
            aead.decrypt(_NONCE_PAD + bytes(body[:8]), tag, body[8:-TAG_BYTES])
        except InvalidTag:
            raise ProtocolError("frame with a bad tag") from None
        return field ^ GCM_FRAME
    mac = blake2b_proto.copy()
    mac.update(body[:-TAG_BYTES])
    if not hmac.compare_digest(mac.digest(), tag):
        raise ProtocolError("frame with a bad tag")
    return field


def decode_records(payload) -> list[tuple[str, object]]:
    """All (channel, message) records of one verified payload, or ProtocolError (nothing is delivered)."""
    records = []
    offset, end = 0, len(payload)
    unpack_from, loads = LENGTH.unpack_from, plain_marshal.loads
    try:
        while offset < end:
            (size,) = unpack_from(payload, offset)
            offset += 4 + size
            if offset > end:
                raise ProtocolError("record longer than its frame")
            records.append(loads(payload[offset - size:offset]))
    except ProtocolError:
        raise
    except Exception as exc:  # plain_marshal's refusals, and struct's on a cut length
        raise ProtocolError(f"undecodable record: {exc}") from None
    for record in records:
        if type(record) is not tuple or len(record) != 2 or type(record[0]) is not str:
            raise ProtocolError("a record is not (channel, message)")
    return records


def _coalesce(parts: list) -> list:
    """Join runs of small parts so the socket sees few, large buffers; large parts are kept as they are."""
    if len(parts) <= 4:
        return parts
    out, run = [], []
    for part in parts:
        if len(part) < COALESCE_BYTES:
            run.append(part)
            continue
        if run:
            out.append(b"".join(run))
            run = []
        out.append(part)
    if run:
        out.append(b"".join(run))
    return out


def parse_address(address) -> tuple[str, int]:
    """'host:port', '[v6]:port' or (host, port) → (host, port)."""
    if isinstance(address, tuple):
        return str(address[0]), int(address[1])
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    return host.strip("[]"), int(port)


def _resolve(host: str, port: int, passive: bool = False):
    flags = socket.AI_PASSIVE if passive else 0
    family, _, _, _, sockaddr = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, flags)[0]
    return family, sockaddr


# ---------------------------------------------------------------------------------------------- connection
class _Connection:
    """One TCP connection's state and buffers; the hub decides what happens to it."""

    def __init__(self, sock: socket.socket, *, dialer: bool, peer_id: int | None, deadline: float,
                 source: str = ""):
        self.sock = sock
        self.dialer = dialer
        self.peer_id = peer_id
        self.source = source  # the remote host of an accepted connection
        self.state = "connecting" if dialer else "hello"  # "tls" while a TLS handshake runs
        self.tls = False
        self.tls_chunk = None  # the bytes an unfinished SSL write must be retried with
        self.deadline = deadline
        self.closed = False
        self.nonce = os.urandom(NONCE_BYTES)
        self.transcript = b""
        self.send_mac = self.recv_mac = None  # BLAKE2b prototypes
        self.send_key = b""
        self.send_gcm: AESGCM | None = None  # set once the peer offered GCM tags
        self.recv_gcm: AESGCM | None = None
        self.send_seq = self.recv_seq = 0
        self.pending: list[bytes] = []  # encoded records not yet framed
        self.pending_bytes = 0
        self.out: deque = deque()  # framed bytes not yet written
        self.out_bytes = 0
        self.writing = False  # registered for EVENT_WRITE
        self.rbuf = bytearray(RECV_BUFFER_BYTES)
        self.rview = memoryview(self.rbuf)
        self.rstart = self.rend = 0
        self.need = HELLO.size  # bytes of the unit being read: hello, proof, frame length or frame body
        self.in_body = False
        self.large_unit_at = 0  # recv_seq when a unit larger than RECV_BUFFER_BYTES was last read

    def queue(self, data: bytes) -> None:
        self.out.append(data)
        self.out_bytes += len(data)

    @property
    def has_output(self) -> bool:
        return bool(self.out) or self.tls_chunk is not None

    def take_chunk(self, limit: int) -> bytes:
        """Up to `limit` queued bytes (at least one part) joined and removed from the queue."""
        parts, size = [], 0
        while self.out and (not parts or size + len(self.out[0]) <= limit):
            part = self.out.popleft()
            parts.append(part)
            size += len(part)
        self.out_bytes -= size
        return b"".join(parts)

    def consume_out(self, sent: int) -> None:
        self.out_bytes -= sent
        out = self.out
        while sent:
            first = out[0]
            if sent < len(first):
                out[0] = memoryview(first)[sent:]
                return
            sent -= len(first)
            out.popleft()

    def take(self) -> memoryview | None:
        """The next complete unit of `need` bytes, or None until it has arrived."""
        if self.rend - self.rstart < self.need:
            return None
        unit = self.rview[self.rstart:self.rstart + self.need]
        self.rstart += self.need
        return unit

    def make_room(self) -> None:
        """Ensure free space after the buffered bytes and room for the whole unit being read."""
        size = self.rend - self.rstart
        capacity = len(self.rbuf)
        if self.need > RECV_BUFFER_BYTES:
            self.large_unit_at = self.recv_seq  # large frames still arrive: keep the grown buffer
        if self.need > capacity:
            self._replace(self.need, size)
        elif size == 0 and capacity > RECV_BUFFER_BYTES and self.recv_seq - self.large_unit_at > RECV_BUFFER_SHRINK_AFTER_FRAMES:
            self._replace(RECV_BUFFER_BYTES, size)  # large frames stopped: give the memory back
        elif self.rend == capacity or self.rstart + self.need > capacity:
            self.rbuf[:size] = self.rbuf[self.rstart:self.rend]  # same length: no resize
            self.rstart, self.rend = 0, size
        elif size == 0:
            self.rstart = self.rend = 0

    def _replace(self, capacity: int, size: int) -> None:
        buf = bytearray(capacity)
        buf[:size] = self.rview[self.rstart:self.rend]
        self.rbuf, self.rview = buf, memoryview(buf)
        self.rstart, self.rend = 0, size


# ---------------------------------------------------------------------------------------------- hub
class RaftHub:
    """Raft transport of one broker: see the module docstring. Everything but `wakeup` is loop-thread only."""

    OFFERS_GCM_TAGS = True  # False: the first wire version only (BLAKE2b both ways), as brokers before the offer

    def __init__(self, node_id: int, listen, peers: dict, secret: bytes, *,
                 on_message: Callable[[int, str, object], None],
                 on_peer_connected: Callable[[int], None],
                 on_peer_disconnected: Callable[[int], None],
                 frame_bytes_max: int, send_buffer_bytes_max: int, connect_retry_ms: int,
                 handshake_timeout_ms: int, handshakes_pending_max: int = 64,
                 handshakes_pending_per_address_max: int = 8, tls=None, accepted_secrets=(),
                 reuse_port: bool = False, clock: Clock = monotonic_s):
        if len(secret) < 16 or any(len(s) < 16 for s in accepted_secrets):
            raise ValueError("the Raft secret must be at least 16 bytes")
        if frame_bytes_max <= FRAME_OVERHEAD + 64:
            raise ValueError("frame_bytes_max is too small")
        self.node_id = int(node_id)
        self.on_woken: Callable[[], None] = lambda: None  # every time a wait for socket events ends (the loop's)
        self._clock = clock  # monotonic seconds: handshake deadlines and redials
        self._listen = parse_address(listen)
        self._peers = self._parse_peers(peers)
        self._secret = bytes(secret)
        # Keys a dialer may also prove (never used to dial): a secret being rotated in or out.
        self._accepted = [self._secret] + [bytes(s) for s in accepted_secrets if bytes(s) != self._secret]
        self._on_message = on_message
        self._on_peer_connected = on_peer_connected
        self._on_peer_disconnected = on_peer_disconnected
        self.frame_bytes_max = frame_bytes_max
        self.send_buffer_bytes_max = send_buffer_bytes_max
        self._retry_s = connect_retry_ms / 1000
        self._handshake_s = handshake_timeout_ms / 1000
        self.handshakes_pending_max = handshakes_pending_max
        self.handshakes_pending_per_address_max = handshakes_pending_per_address_max
        self._tls = tls  # RaftTls (server and client SSL contexts) or None
        self._reuse_port = reuse_port  # SO_REUSEPORT: the port may be held reserved by a supervisor
        self._tls_readable: set[_Connection] = set()  # TLS connections with decrypted bytes not yet read
        self._selector = selectors.DefaultSelector()
        self._server: socket.socket | None = None
        self._ready: dict[int, _Connection] = {}
        self._queued = False  # messages queued since the last flush
        self._outgoing: dict[int, _Connection] = {}
        self._handshaking: set[_Connection] = set()
        self._next_dial: dict[int, float] = {}
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._closed = False
        self._stats = dict.fromkeys((
            "bytes_in", "bytes_out", "frames_in", "frames_out", "messages_in", "messages_out",
            "handshakes_ok", "handshakes_rejected", "frames_rejected", "send_buffer_overflows",
            "connections_lost", "connect_failures", "handshakes_over_limit", "tls_handshakes_failed"), 0)

    def _parse_peers(self, peers: dict) -> dict[int, tuple[str, int]]:
        return {int(p): parse_address(a) for p, a in peers.items() if int(p) != self.node_id}

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        host, port = self._listen
        family, sockaddr = _resolve(host, port, passive=True)
        server = socket.socket(family, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if self._reuse_port:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        server.bind(sockaddr)
        server.listen(128)
        server.setblocking(False)
        self._server = server
        self._selector.register(server, selectors.EVENT_READ, "accept")
        log.info("raft transport of node %s listening on %s", self.node_id, self.address)

    @property
    def address(self) -> str:
        host, port = self._server.getsockname()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def close(self) -> None:
        """Close every connection and the listener; no callbacks run (the loop has stopped)."""
        if self._closed:
            return
        self._closed = True
        for conn in list(self._handshaking) + list(self._ready.values()):
            self._close_socket(conn)
        self._ready.clear()
        self._outgoing.clear()
        self._handshaking.clear()
        for sock in (self._server, self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()
        self._selector.close()

    def wakeup(self) -> None:
        """Make a poll in progress (or the next one) return at once; safe from any thread."""
        try:
            self._wake_w.send(b"\0")
        except OSError:  # full (a wake-up is pending anyway) or closed
            pass

    # ------------------------------------------------------------------ queries
    def connected_peers(self) -> set[int]:
        return set(self._ready)

    def buffered_bytes(self, peer_id: int) -> int:
        """Bytes queued to the peer and not yet written to its socket (0 when it is not connected)."""
        conn = self._ready.get(peer_id)
        return 0 if conn is None else conn.pending_bytes + conn.out_bytes

    def stats(self) -> dict:
        return dict(self._stats, peers_connected=len(self._ready), handshakes_pending=len(self._handshaking),
                    peers_gcm_tagged=sum(1 for conn in self._ready.values() if conn.send_gcm is not None))

    def set_peers(self, peers: dict) -> None:
        """Replace the peer table: connections to removed peers (or moved dialed ones) close, new ones dial."""
        new = self._parse_peers(peers)
        for conn in list(self._ready.values()) + list(self._handshaking):
            if conn.peer_id is None:
                continue  # an incoming connection that has not said who it is: its hello is checked later
            moved = conn.dialer and new.get(conn.peer_id) != self._peers.get(conn.peer_id)
            if conn.peer_id not in new or moved:
                self._close(conn, "peer removed from the peer table or moved")
        self._peers = new
        for peer_id in list(self._next_dial):
            if peer_id not in new:
                del self._next_dial[peer_id]

    # ------------------------------------------------------------------ sending
    def send(self, peer_id: int, channel: str, message) -> bool:
        """Queue a message for the next flush; False when the peer is not connected.

        Raises ValueError when the message cannot be encoded or its frame would exceed frame_bytes_max."""
        record = plain_marshal.dumps((channel, message))
        if len(record) + LENGTH.size + FRAME_OVERHEAD > self.frame_bytes_max:
            raise ValueError(f"a message of {len(record)} bytes exceeds frame_bytes_max={self.frame_bytes_max}")
        conn = self._ready.get(peer_id)
        if conn is None:
            return False
        size = len(record)
        if size < COALESCE_BYTES:
            conn.pending.append(LENGTH.pack(size) + record)
        else:  # large: keep the length apart rather than copy the record
            conn.pending.append(LENGTH.pack(size))
            conn.pending.append(record)
        conn.pending_bytes += size + LENGTH.size
        if conn.pending_bytes + conn.out_bytes > self.send_buffer_bytes_max:
            self._stats["send_buffer_overflows"] += 1
            self._close(conn, f"send buffer above {self.send_buffer_bytes_max} bytes")
            return False
        self._stats["messages_out"] += 1
        self._queued = True
        return True

    def has_pending(self) -> bool:
        """Whether messages were queued since the last flush."""
        return self._queued

    def flush(self) -> None:
        """Frame everything queued since the last flush and write as much as the sockets take."""
        self._queued = False
        for conn in list(self._ready.values()):
            if conn.pending:
                self._frame_pending(conn)
            if conn.has_output and not conn.closed:
                self._write(conn)

    def _frame_pending(self, conn: _Connection) -> None:
        """Cut the queued records into frames of at most frame_bytes_max (one frame unless they do not fit)."""
        pieces, total, conn.pending, conn.pending_bytes = conn.pending, conn.pending_bytes, [], 0
        limit = self.frame_bytes_max - FRAME_OVERHEAD
        if total <= limit:
            self._queue_frame(conn, pieces)
            return
        start, size, i = 0, 0, 0
        while i < len(pieces):
            # A large record's length travels as a 4-byte piece of its own (small records are >= 5 bytes
            # with their length), and stays in the same frame as the record.
            n = 2 if len(pieces[i]) == LENGTH.size else 1
            length = sum(map(len, pieces[i:i + n]))
            if size and size + length > limit:
                self._queue_frame(conn, pieces[start:i])
                start, size = i, 0
            size += length
            i += n
        if start < len(pieces):
            self._queue_frame(conn, pieces[start:])

    def _queue_frame(self, conn: _Connection, parts: list) -> None:
        parts = _coalesce(parts)
        conn.send_seq += 1
        if conn.send_gcm is not None:
            header, tag = seal_gcm(conn.send_gcm, conn.send_key, conn.send_seq, parts)
        else:
            header, tag = seal(conn.send_mac, conn.send_seq, parts)
        conn.queue(header)
        for part in parts:
            conn.queue(part)
        conn.queue(tag)
        self._stats["frames_out"] += 1

    def _write(self, conn: _Connection) -> None:
        if conn.tls:
            self._write_tls(conn)
            return
        try:
            while conn.out:
                parts = list(islice(conn.out, SEND_PARTS_PER_CALL_MAX))
                sent = conn.sock.sendmsg(parts)
                self._stats["bytes_out"] += sent
                conn.consume_out(sent)
                if sent < sum(map(len, parts)):
                    break
        except BlockingIOError:
            pass
        except OSError as exc:
            self._lost(conn, f"write failed: {exc}")
            return
        self._want_write(conn, bool(conn.out))

    def _write_tls(self, conn: _Connection) -> None:
        """Write through TLS: an SSL write that could not finish is retried with the very same bytes."""
        try:
            while conn.has_output:
                if conn.tls_chunk is None:
                    conn.tls_chunk = conn.take_chunk(TLS_WRITE_BYTES)
                sent = conn.sock.send(conn.tls_chunk)
                self._stats["bytes_out"] += sent
                conn.tls_chunk = conn.tls_chunk[sent:] if sent < len(conn.tls_chunk) else None
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
            pass
        except OSError as exc:  # ssl.SSLError included
            self._lost(conn, f"write failed: {exc}")
            return
        self._want_write(conn, conn.has_output)

    def _want_write(self, conn: _Connection, want: bool) -> None:
        if conn.writing != want and not conn.closed:
            conn.writing = want
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
            self._selector.modify(conn.sock, events, conn)

    # ------------------------------------------------------------------ polling
    def poll(self, timeout_s: float) -> None:
        """Wait up to timeout_s for socket events and handle them all; dial peers that are due."""
        if self._closed:
            return
        now = self._clock()
        self._dial_due(now)
        for conn in list(self._tls_readable):  # decrypted bytes wait in OpenSSL: select cannot see them
            if not conn.closed:
                self._on_readable(conn)
        wait_s = 0.0 if self._tls_readable else self._wait_s(timeout_s, now)
        events = self._selector.select(wait_s)
        self.on_woken()
        for key, mask in events:
            self._on_event(key.data, mask)
        self._expire_handshakes(self._clock())

    def _wait_s(self, timeout_s: float, now: float) -> float:
        due = [conn.deadline for conn in self._handshaking]
        due.extend(self._next_dial.get(p, now) for p in self._peers if p > self.node_id and p not in self._outgoing)
        return max(0.0, min([timeout_s, *(d - now for d in due)]))

    def _on_event(self, data, mask: int) -> None:
        if data == "accept":
            self._accept()
        elif data == "wake":
            self._drain_wakeups()
        elif data.state == "tls":
            self._tls_step(data)
        else:
            if mask & selectors.EVENT_WRITE and not data.closed:
                self._on_writable(data)
            if mask & selectors.EVENT_READ and not data.closed:
                self._on_readable(data)

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _expire_handshakes(self, now: float) -> None:
        for conn in [c for c in self._handshaking if now >= c.deadline]:
            self._reject(conn, "handshake not finished in time")

    # ------------------------------------------------------------------ connecting
    def _dial_due(self, now: float) -> None:
        for peer_id, (host, port) in list(self._peers.items()):
            if peer_id > self.node_id and peer_id not in self._outgoing and now >= self._next_dial.get(peer_id, 0):
                self._next_dial[peer_id] = now + self._retry_s
                self._dial(peer_id, host, port, now)

    def _dial(self, peer_id: int, host: str, port: int, now: float) -> None:
        try:
            family, sockaddr = _resolve(host, port)
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:
            self._stats["connect_failures"] += 1
            log.warning("cannot dial node %s at %s:%s: %s", peer_id, host, port, exc)
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection(sock, dialer=True, peer_id=peer_id, deadline=now + self._handshake_s, source=host)
        self._outgoing[peer_id] = conn
        self._handshaking.add(conn)
        conn.writing = True
        self._selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
        error = sock.connect_ex(sockaddr)
        if error not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
            self._connect_failed(conn, os.strerror(error))

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_POLL_MAX):
            try:
                sock, remote = self._server.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("accept on the Raft port failed: %s", exc)
                return
            self._adopt(sock, str(remote[0]))

    def _adopt(self, sock: socket.socket, source: str) -> None:
        incoming = [c for c in self._handshaking if not c.dialer]
        from_source = sum(1 for c in incoming if c.source == source)
        if len(incoming) >= self.handshakes_pending_max or from_source >= self.handshakes_pending_per_address_max:
            self._stats["handshakes_rejected"] += 1
            self._stats["handshakes_over_limit"] += 1
            sock.close()
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection(sock, dialer=False, peer_id=None, deadline=self._clock() + self._handshake_s,
                           source=source)
        self._handshaking.add(conn)
        if self._tls is not None:
            conn.sock = self._tls.server.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            conn.tls, conn.state = True, "tls"
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)
            self._tls_step(conn)
            return
        self._selector.register(sock, selectors.EVENT_READ, conn)
        self._send_hello(conn)

    def _send_hello(self, conn: _Connection) -> None:
        conn.state = "hello"
        conn.queue(hello_bytes(self.node_id, conn.nonce))
        self._write(conn)

    def _on_writable(self, conn: _Connection) -> None:
        if conn.state == "connecting":
            error = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                self._connect_failed(conn, os.strerror(error))
            elif self._tls is not None:
                self._start_client_tls(conn)
            else:
                self._send_hello(conn)
            return
        self._write(conn)

    # ------------------------------------------------------------------ TLS
    def _start_client_tls(self, conn: _Connection) -> None:
        """Wrap a connected dialing socket in TLS; the peer's certificate must match its address in the peer table."""
        self._selector.unregister(conn.sock)
        conn.writing = False
        try:
            conn.sock = self._tls.client.wrap_socket(conn.sock, server_hostname=conn.source,
                                                     do_handshake_on_connect=False)
        except (OSError, ValueError) as exc:
            self._connect_failed(conn, f"TLS setup failed: {exc}")
            return
        conn.tls, conn.state = True, "tls"
        self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        self._tls_step(conn)

    def _tls_step(self, conn: _Connection) -> None:
        """Advance a TLS handshake; once done, the raftbus handshake starts inside it."""
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._want_write(conn, False)
            return
        except ssl.SSLWantWriteError:
            self._want_write(conn, True)
            return
        except OSError as exc:  # ssl.SSLError (a refused certificate) included
            self._stats["tls_handshakes_failed"] += 1
            log.warning("node %s: TLS handshake with %s failed: %s", self.node_id,
                        conn.peer_id if conn.dialer else conn.source, exc)
            self._lost(conn, f"TLS handshake failed: {exc}")
            return
        self._want_write(conn, False)
        self._send_hello(conn)
        if not conn.closed:
            self._on_readable(conn)  # the peer's hello may already sit decrypted in OpenSSL's buffer

    def _connect_failed(self, conn: _Connection, reason: str) -> None:
        self._stats["connect_failures"] += 1
        log.debug("connecting to node %s failed: %s", conn.peer_id, reason)
        self._close(conn, None)

    # ------------------------------------------------------------------ reading
    def _on_readable(self, conn: _Connection) -> None:
        self._tls_readable.discard(conn)
        budget = RECV_BYTES_PER_POLL_MAX
        while budget > 0 and not conn.closed:
            conn.make_room()
            space = len(conn.rbuf) - conn.rend
            try:
                received = conn.sock.recv_into(conn.rview[conn.rend:])
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except OSError as exc:
                self._lost(conn, f"read failed: {exc}")
                return
            if received == 0:
                self._lost(conn, "closed by the peer")
                return
            conn.rend += received
            budget -= received
            self._stats["bytes_in"] += received
            self._consume(conn)
            if received < space and not conn.tls:  # TLS hands over one record per call: read on
                return
        if conn.tls and not conn.closed and conn.sock.pending():
            self._tls_readable.add(conn)  # over this poll's budget: read the rest at the next poll

    def _consume(self, conn: _Connection) -> None:
        while not conn.closed:
            if conn.state == "hello" and conn.rend - conn.rstart >= len(MAGIC) and \
                    conn.rbuf[conn.rstart:conn.rstart + len(MAGIC)] != MAGIC:
                self._reject(conn, "not a raftbus Raft hello")
                return
            unit = conn.take()
            if unit is None:
                return
            if conn.state == "hello":
                self._on_hello(conn, unit)
            elif conn.state == "proof":
                self._on_proof(conn, unit)
            elif conn.in_body:
                self._on_frame(conn, unit)
            else:
                self._on_length(conn, unit)

    def _on_hello(self, conn: _Connection, unit) -> None:
        try:
            peer_id, nonce = parse_hello(unit)
        except ProtocolError as exc:
            self._reject(conn, str(exc))
            return
        problem = self._hello_problem(conn, peer_id)
        if problem:
            self._reject(conn, problem)
            return
        conn.peer_id = peer_id
        conn.state, conn.need = "proof", PROOF_BYTES
        if conn.dialer:  # the dialer proves first; the acceptor answers only a correct proof
            conn.transcript = transcript(conn.nonce, nonce, self.node_id, peer_id)
            conn.queue(handshake_proof(self._secret, conn.transcript, DIALER))
            self._write(conn)
        else:
            conn.transcript = transcript(nonce, conn.nonce, peer_id, self.node_id)

    def _hello_problem(self, conn: _Connection, peer_id: int) -> str | None:
        if conn.dialer:
            return None if peer_id == conn.peer_id else f"node {conn.peer_id} answered as node {peer_id}"
        if peer_id not in self._peers:
            return f"unknown node id {peer_id}"
        if peer_id >= self.node_id:
            return f"node {peer_id} dialed node {self.node_id}; the lower id dials"
        return None

    def _proven_key(self, conn: _Connection, proof: bytes) -> bytes | None:
        """The key the peer's proof was made with: ours for a dialer, any accepted one for an acceptor."""
        peer_side = ACCEPTOR if conn.dialer else DIALER
        for key in [self._secret] if conn.dialer else self._accepted:
            if hmac.compare_digest(proof, handshake_proof(key, conn.transcript, peer_side)):
                return key
        return None

    def _on_proof(self, conn: _Connection, unit) -> None:
        side, peer_side = (DIALER, ACCEPTOR) if conn.dialer else (ACCEPTOR, DIALER)
        key = self._proven_key(conn, bytes(unit))
        if key is None:
            self._reject(conn, "wrong handshake proof (a different cluster secret?)")
            return
        if not conn.dialer:
            conn.queue(handshake_proof(key, conn.transcript, ACCEPTOR))
            self._write(conn)
            if conn.closed:
                return
        conn.send_key = session_key(key, conn.transcript, side)
        recv_key = session_key(key, conn.transcript, peer_side)
        conn.send_mac, conn.recv_mac = blake2b_mac(conn.send_key), blake2b_mac(recv_key)
        conn.recv_gcm = AESGCM(recv_key)
        conn.state, conn.need, conn.in_body = "ready", LENGTH.size, False
        self._handshaking.discard(conn)
        old = self._ready.get(conn.peer_id)
        if old is not None:
            self._close(old, "replaced by a newer authenticated connection")
        self._ready[conn.peer_id] = conn
        self._stats["handshakes_ok"] += 1
        if self.OFFERS_GCM_TAGS:
            self.send(conn.peer_id, HUB_CHANNEL, FRAME_TAGS_OFFER)  # leaves in the first frame, BLAKE2b-tagged
        log.info("node %s connected to node %s", self.node_id, conn.peer_id)
        self._notify(self._on_peer_connected, conn.peer_id)

    def _on_length(self, conn: _Connection, unit) -> None:
        (length,) = LENGTH.unpack(unit)
        if length > self.frame_bytes_max or length < FRAME_OVERHEAD:
            self._reject(conn, f"frame length {length} outside [{FRAME_OVERHEAD}, {self.frame_bytes_max}]")
            return
        conn.need, conn.in_body = length, True

    def _on_frame(self, conn: _Connection, body) -> None:
        conn.need, conn.in_body = LENGTH.size, False
        try:
            seq = check_tag(conn.recv_mac, conn.recv_gcm, body)
        except ProtocolError as exc:
            self._reject(conn, str(exc))
            return
        if seq != conn.recv_seq + 1:
            self._reject(conn, f"frame {seq} after frame {conn.recv_seq} (replayed or reordered)")
            return
        conn.recv_seq = seq
        try:
            records = decode_records(body[8:-TAG_BYTES])
        except ProtocolError as exc:
            self._reject(conn, str(exc))
            return
        self._stats["frames_in"] += 1
        self._stats["messages_in"] += len(records)
        for channel, message in records:
            if conn.closed:
                return
            if channel == HUB_CHANNEL and self.OFFERS_GCM_TAGS:
                self._on_hub_record(conn, message)
            else:
                self._notify(self._on_message, conn.peer_id, channel, message)

    def _on_hub_record(self, conn: _Connection, message) -> None:
        """A record between hubs: an offer of GCM tags switches the frames sent to that peer from the next one on.
        Anything else is ignored (a later version's record)."""
        if type(message) is tuple and len(message) == 2 and message[0] == FRAME_TAGS_OFFER[0] \
                and message[1] == GCM_TAGS and conn.send_gcm is None:
            conn.send_gcm = AESGCM(conn.send_key)

    # ------------------------------------------------------------------ closing
    def _reject(self, conn: _Connection, reason: str) -> None:
        counter = "frames_rejected" if conn.state == "ready" else "handshakes_rejected"
        self._stats[counter] += 1
        log.warning("node %s closed a Raft connection (peer %s): %s", self.node_id, conn.peer_id, reason)
        self._close(conn, None)

    def _lost(self, conn: _Connection, reason: str) -> None:
        if conn.state == "ready":
            self._stats["connections_lost"] += 1
            log.info("node %s lost node %s: %s", self.node_id, conn.peer_id, reason)
            self._close(conn, None)
        elif conn.dialer:
            self._connect_failed(conn, reason)
        else:
            self._reject(conn, f"handshake cut short: {reason}")

    def _close(self, conn: _Connection, reason: str | None) -> None:
        """Close a connection; an established one is reported to on_peer_disconnected."""
        if conn.closed:
            return
        if reason:
            log.warning("node %s closed its connection to node %s: %s", self.node_id, conn.peer_id, reason)
        self._close_socket(conn)
        self._handshaking.discard(conn)
        if self._outgoing.get(conn.peer_id) is conn:
            del self._outgoing[conn.peer_id]
        if self._ready.get(conn.peer_id) is conn:
            del self._ready[conn.peer_id]
            self._notify(self._on_peer_disconnected, conn.peer_id)

    def _close_socket(self, conn: _Connection) -> None:
        conn.closed = True
        self._tls_readable.discard(conn)
        conn.tls_chunk = None
        conn.out.clear()
        conn.pending.clear()
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    @staticmethod
    def _notify(callback, *args) -> None:
        try:
            callback(*args)
        except Exception:
            log.exception("raft transport callback %s failed", getattr(callback, "__name__", callback))
