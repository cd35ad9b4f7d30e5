"""Connections to the client port from one source address, bounded (`grpc_connections_per_address_max`).

gRPC's server accepts its connections inside its core and offers no hook there, only a bound on all of them
(`grpc_connections_max`). So `AddressBound` sweeps every `SWEEP_INTERVAL_S` over this process's own descriptors
(/proc/self/fd): each socket descriptor is looked at once (on a duplicate: its local and peer address), and a
connection to the client port (on the listening address, or on any local address for a wildcard or a host name)
is remembered by its socket inode with its peer's address and the sweep that first saw it. For each peer address
holding more than the bound, the sweep looks at the state of its connections (TCP_INFO: closing ones do not count)
and shuts down the newest established ones past it (the last seen; among those one sweep first saw, the highest
socket inodes: inode numbers are not handed out in order across CPUs), through a duplicate of the descriptor checked
to still be that socket (fstat's inode): gRPC's core sees the connection end and closes it. Nothing else is touched:
a connection whose descriptor changed meanwhile is left alone.

A sweep costs an fstat per open descriptor; the kernel's tables (/proc/net/tcp and tcp6) are not read: producing
them walks the machine's whole established-connection hash, whatever few connections the port has.

So one address can hold more than its share for at most one sweep, never more than `grpc_connections_max`; the
reserve of descriptors does not depend on this bound (see broker/storage/open_files.py).
"""
from __future__ import annotations

import ipaddress
import logging
import os
import socket
import stat
import threading

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 1.0
_SELF_FDS = "/proc/self/fd"
_TCP_ESTABLISHED = 1  # tcp_info.tcpi_state
IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def normal_ip(address: str) -> IP:
    """An address as sockets report it; an IPv4-mapped IPv6 address comes back as its IPv4 address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return ip.ipv4_mapped or ip if ip.version == 6 else ip


def listening_ip(host: str) -> IP | None:
    """The one local address a listener bound to `host` accepts on, or None for a wildcard or a host name
    (then every local address of the port counts)."""
    try:
        ip = normal_ip(host.strip("[]"))
    except ValueError:
        return None
    return None if ip.is_unspecified else ip


def _with_duplicate(fd: int, inode: int, action):
    """action(socket) on a duplicate of descriptor `fd` if it still is the socket `inode`, else None."""
    try:
        duplicate = os.dup(fd)
    except OSError:
        return None
    try:
        if os.fstat(duplicate).st_ino != inode:
            return None  # the descriptor was closed and reused meanwhile
        sock = socket.socket(fileno=duplicate)
        duplicate = -1  # the socket object owns it now
        try:
            return action(sock)
        finally:
            sock.close()
    except OSError:
        return None
    finally:
        if duplicate >= 0:
            os.close(duplicate)


def _peer_if_client(port: int, local_ip: IP | None):
    """For _with_duplicate: the peer's address of a connection to local `port` (on `local_ip` when given), else
    "" (another socket: a listener, an outgoing connection, another port)."""
    def look(sock: socket.socket) -> str:
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
            return ""
        local = sock.getsockname()
        if local[1] != port or (local_ip is not None and normal_ip(local[0]) != local_ip):
            return ""
        try:
            return str(normal_ip(sock.getpeername()[0]))
        except OSError:  # not connected: a listener
            return ""
    return look


def _established(sock: socket.socket) -> bool:
    """For _with_duplicate: whether the connection is still established (not one shut down and closing)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == _TCP_ESTABLISHED


def _shut(sock: socket.socket) -> bool:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    return True


class AddressBound:
    """Sweeps the client port's connections (see the module docstring); `start` runs it on a thread."""

    def __init__(self, port: int, per_address_max: int, host: str = ""):
        self.port = port
        self.local_ip = listening_ip(host)  # connections to other local addresses of the port are not ours
        self.per_address_max = per_address_max
        self.closed_total = 0
        # socket inode -> (the client's address, or "" for another socket; the look that first saw it)
        self._known: dict[int, tuple[str, int]] = {}
        self._looks = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def connections(self) -> list[tuple[str, int, int, int]]:
        """(client address, socket inode, descriptor, the look that first saw it) of each connection to the client
        port this process holds, established or closing."""
        self._looks += 1
        found, known, look = [], {}, _peer_if_client(self.port, self.local_ip)
        for name in os.listdir(_SELF_FDS):
            fd = int(name)
            try:
                st = os.fstat(fd)
            except OSError:
                continue  # closed since the listing
            if not stat.S_ISSOCK(st.st_mode):
                continue
            seen = self._known.get(st.st_ino)
            if seen is None:
                peer = _with_duplicate(fd, st.st_ino, look)
                if peer is None:
                    continue  # changed meanwhile: looked at again next sweep
                seen = (peer, self._looks)
            known[st.st_ino] = seen
            if seen[0]:
                found.append((seen[0], st.st_ino, fd, seen[1]))
        self._known = known
        return found

    def sweep(self) -> int:
        """Shut down the connections past the bound, per client address; how many."""
        by_address: dict[str, list[tuple[int, int, int]]] = {}
        for address, inode, fd, first_look in self.connections():
            by_address.setdefault(address, []).append((first_look, inode, fd))
        closed = 0
        for address, held in by_address.items():
            if len(held) <= self.per_address_max:
                continue
            held = [(look, inode, fd) for look, inode, fd in held if _with_duplicate(fd, inode, _established)]
            if len(held) <= self.per_address_max:
                continue  # the rest are closing (shut down by an earlier sweep or by the client)
            shut = sum(bool(_with_duplicate(fd, inode, _shut)) for _, inode, fd in sorted(held)[self.per_address_max:])
            if shut:
                log.warning("closed %d client connections from %s past grpc_connections_per_address_max=%d",
                            shut, address, self.per_address_max)
            closed += shut
        self.closed_total += closed
        return closed

    def _run(self) -> None:
        while not self._stop.wait(SWEEP_INTERVAL_S):
            try:
                self.sweep()
            except Exception:  # a sweep never stops the broker; the next one tries again
                log.exception("client connection sweep failed")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="raftbus-address-bound", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
