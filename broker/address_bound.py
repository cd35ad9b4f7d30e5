"""Connections to the client port from one source address, bounded (`grpc_connections_per_address_max`).

gRPC's server accepts its connections inside its core and offers no hook there, only a bound on all of them
(`grpc_connections_max`). So `AddressBound` sweeps every `SWEEP_INTERVAL_S`: it reads the established TCP
connections to the client port (on the listening address, or on any local address for a wildcard or a host
name) from /proc/net/tcp and /proc/net/tcp6 (the kernel's table: remote address and socket
inode), and for each source address holding more than the bound it shuts down the newest of that address's
connections past the bound (the highest socket inodes). It finds their descriptors among this process's own
(/proc/self/fd), checks on a duplicate that the descriptor still is that socket (fstat's inode), and shuts it down
through the duplicate: gRPC's core sees the connection end and closes it. Nothing else is touched: a connection
whose descriptor is not this process's, or changed meanwhile, is left alone.

So one address can hold more than its share for at most one sweep, never more than `grpc_connections_max`; the
reserve of descriptors does not depend on this bound (see broker/storage/open_files.py).
"""
from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 1.0
_ESTABLISHED = "01"
_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def kernel_ip(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as /proc/net/tcp{,6} write it (hex, in 32-bit words of host byte order); an IPv4-mapped IPv6
    address comes back as its IPv4 address."""
    raw = bytes.fromhex(hex_address)
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(raw)
    return ip.ipv4_mapped or ip if ip.version == 6 else ip


def listening_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The one local address a listener bound to `host` accepts on, or None for a wildcard or a host name
    (then every local address of the port counts)."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if ip.is_unspecified:
        return None
    return ip.ipv4_mapped or ip if ip.version == 6 else ip


def established(port: int, host: str = "") -> list[tuple[str, int]]:
    """(remote address as the kernel writes it, socket inode) of each established connection to local `port`
    (on the address `host` names, when it names one: another listener may use the same port number on another
    local address)."""
    suffix = f":{port:04X}"
    local_ip = listening_ip(host)
    found = []
    for table in _TABLES:
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 9 and fields[3] == _ESTABLISHED and fields[1].endswith(suffix) and (
                            local_ip is None or kernel_ip(fields[1].rsplit(":", 1)[0]) == local_ip):
                        found.append((fields[2].rsplit(":", 1)[0], int(fields[9])))
        except FileNotFoundError:
            continue
    return found


def _socket_descriptors(inodes: set[int]) -> dict[int, int]:
    """This process's descriptors of the sockets with those inodes: inode -> descriptor."""
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target in wanted:
            found[wanted[target]] = int(name)
    return found


def _shut_down(fd: int, inode: int) -> bool:
    try:
        duplicate = os.dup(fd)
    except OSError:
        return False
    try:
        if os.fstat(duplicate).st_ino != inode:
            return False  # the descriptor was closed and reused meanwhile
        sock = socket.socket(fileno=duplicate)
        duplicate = -1  # the socket object owns it now
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            sock.close()
        return True
    finally:
        if duplicate >= 0:
            os.close(duplicate)


class AddressBound:
    """Sweeps the client port's connections (see the module docstring); `start` runs it on a thread."""

    def __init__(self, port: int, per_address_max: int, host: str = ""):
        self.port = port
        self.host = host  # the listening host: connections to other local addresses of the port are not ours
        self.per_address_max = per_address_max
        self.closed_total = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep(self) -> int:
        """Shut down the connections past the bound, per source address; how many."""
        by_address: dict[str, list[int]] = {}
        for address, inode in established(self.port, self.host):
            by_address.setdefault(address, []).append(inode)
        excess = {address: sorted(inodes)[self.per_address_max:] for address, inodes in by_address.items()
                  if len(inodes) > self.per_address_max}
        if not excess:
            return 0
        descriptors = _socket_descriptors({inode for inodes in excess.values() for inode in inodes})
        closed = 0
        for address, inodes in excess.items():
            shut = sum(_shut_down(descriptors[inode], inode) for inode in inodes if inode in descriptors)
            if shut:
                log.warning("closed %d client connections from one address (%s, kernel notation) past "
                            "grpc_connections_per_address_max=%d", shut, address, self.per_address_max)
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
