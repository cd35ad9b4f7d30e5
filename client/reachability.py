"""What answers at a broker's address when gRPC cannot reach it: nothing, a TLS server, or a plaintext one.

gRPC reports a refused connection, a plaintext client at a TLS port and a TLS client at a plaintext port alike
(UNAVAILABLE, retried until the call's deadline). `probe` tells them apart with one TCP connection: refused or
timed out, else it sends a TLS ClientHello and reads the first bytes of the answer. A TLS server answers with a
TLS record (handshake or alert: type 0x16 or 0x15, version major 3); a plaintext gRPC server answers with HTTP/2
frames (its connection preface is sent first). A connection closed or reset without a byte tells nothing (a broker
stopping or shedding connections does that too), so it is not taken for plaintext. With a CA, `certificate_problem` checks the broker's certificate chain against it as gRPC
would. `Reachability` keeps, per address, since when it has refused connections (the router's connect timeout).
"""
from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass

TLS_RECORD_TYPES = (0x15, 0x16)  # alert, handshake
TLS_VERSION_MAJOR = 0x03


@dataclass(frozen=True, slots=True)
class Probe:
    address: str
    reachable: bool
    speaks_tls: bool | None = None  # None: not reachable, or it did not answer the ClientHello in time
    reason: str = ""                # why not reachable ("Connection refused", "timed out", ...)


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "localhost", int(port)


def _client_hello(host: str) -> bytes:
    """The bytes of a TLS ClientHello (no verification: only the answer's first record matters)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=host)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def is_tls_record(first: bytes) -> bool:
    """Whether an answer's first bytes begin a TLS record (a handshake or an alert)."""
    return len(first) >= 2 and first[0] in TLS_RECORD_TYPES and first[1] == TLS_VERSION_MAJOR


def probe(address: str, timeout_s: float) -> Probe:
    """Connect to `address`; when it accepts, whether it answers a TLS ClientHello as a TLS server."""
    try:
        host, port = split_address(address)
    except ValueError:
        return Probe(address, False, reason="not a host:port")
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        return Probe(address, False, reason=exc.strerror or str(exc) or type(exc).__name__)
    with sock:
        try:
            sock.sendall(_client_hello(host))
            first = sock.recv(5)
        except OSError:  # timed out, or reset before answering: nothing tells what speaks there
            return Probe(address, True, None)
    if not first:  # closed without a byte: a server stopping or shedding connections, not a sign of plaintext
        return Probe(address, True, None)
    return Probe(address, True, is_tls_record(first))


def certificate_problem(address: str, ca_pem: bytes | None, timeout_s: float) -> str | None:
    """Why the broker's certificate chain does not verify against `ca_pem` (None: the system's trust store), or
    None when it does (or the check could not finish). Host names are left to gRPC."""
    host, port = split_address(address)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.set_alpn_protocols(["h2"])
    if ca_pem is None:
        context.load_default_certs()
    else:
        context.load_verify_locations(cadata=ca_pem.decode("ascii", errors="replace"))
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            with context.wrap_socket(sock, server_hostname=host):
                return None
    except ssl.SSLCertVerificationError as exc:
        return exc.verify_message or str(exc)
    except (OSError, ValueError):
        return None


class Reachability:
    """Per address, since when every attempt to reach it was refused (or timed out), on the caller's clock.

    `refused(address)` notes a failed attempt and answers for how long the address has been refusing;
    `reached(address)` ends its streak. Thread-safe."""

    def __init__(self, clock: Callable[[], float]):
        self._clock = clock
        self._since: dict[str, float] = {}
        self._lock = threading.Lock()

    def refused(self, address: str) -> float:
        now = self._clock()
        with self._lock:
            return now - self._since.setdefault(address, now)

    def reached(self, address: str) -> None:
        with self._lock:
            self._since.pop(address, None)

    def refusing_for_s(self, address: str) -> float | None:
        with self._lock:
            since = self._since.get(address)
        return None if since is None else self._clock() - since
