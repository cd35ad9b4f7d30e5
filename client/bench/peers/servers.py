"""The peers' servers: a NATS JetStream cluster and one Redis server on free loopback ports, files in a temp dir.

Each server runs in its own process group with its output in `<name>.log` beside its data; it is stopped by pid
(SIGTERM, then SIGKILL of its process group) and can be killed with SIGKILL by name for the failover workload.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from raftbus.bench.ops import log_tail
from raftbus.bench.runner import LOOPBACK, progress, stop_by_pid
from raftbus.client import settings
from raftbus.client.errors import Unavailable

SERVER_READY_TIMEOUT_MS = 30_000
SERVER_STOP_TIMEOUT_MS = 10_000
SERVER_POLL_MS = 50
NATS_NODES = 3
NATS_CLUSTER_NAME = "raftbus-bench"
# Debian package that ships each binary (`make bench-peers` installs them).
DEBIAN_PACKAGES = {"nats-server": "nats-server", "redis-server": "redis-server"}


def find_binary(name: str) -> str:
    """Path of a server binary on PATH or in /usr/sbin (where Debian puts nats-server)."""
    candidates = [shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    raise Unavailable(f"{name} not found; install it with `apt-get install {DEBIAN_PACKAGES[name]}` "
                      f"(`make bench-peers` does)")


def binary_version(path: str) -> str:
    """The first words of `<binary> --version` ("nats-server: v2.9.10", "Redis server v=7.0.15")."""
    done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    return " ".join((done.stdout or done.stderr).split()[:3])


def nats_config(name: str, client_port: int, route_port: int, route_ports: list[int], store_dir: Path) -> str:
    """nats-server configuration of one JetStream cluster node on loopback, routed to the other nodes."""
    routes = ", ".join(f"nats-route://{LOOPBACK}:{port}" for port in route_ports if port != route_port)
    return (f"server_name: {name}\n"
            f"listen: {LOOPBACK}:{client_port}\n"
            f"jetstream {{\n  store_dir: \"{store_dir}\"\n}}\n"
            f"cluster {{\n  name: {NATS_CLUSTER_NAME}\n  listen: {LOOPBACK}:{route_port}\n"
            f"  routes: [{routes}]\n}}\n")


def redis_command(binary: str, port: int, data_dir: Path, appendonly: str) -> list[str]:
    """redis-server on loopback without RDB snapshots; appendonly "everysec" (AOF written per event loop,
    fsync once a second) or "no" (memory only)."""
    command = [binary, "--port", str(port), "--bind", LOOPBACK, "--dir", str(data_dir), "--save", "",
               "--daemonize", "no"]
    if appendonly == "everysec":
        return command + ["--appendonly", "yes", "--appendfsync", "everysec"]
    return command + ["--appendonly", "no"]


EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ports_free(ports: list[int]) -> bool:
    sockets = []
    try:
        for port in ports:
            s = socket.socket()
            sockets.append(s)
            s.bind((LOOPBACK, port))
        return True
    except OSError:
        return False
    finally:
        for s in sockets:
            s.close()


def free_base_port(count: int) -> int:
    """A base port with `count` consecutive free loopback ports above it, for a peer's server (it cannot bind
    beside a reservation the way a raftbus broker does). Picked below the kernel's ephemeral range, so no
    outgoing connection takes one before the server binds it."""
    try:
        ceiling = int(EPHEMERAL_PORTS.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ceiling = 32_768
    for _ in range(settings.BENCH_PORT_ATTEMPTS_MAX):
        base = random.randrange(10_000, ceiling - count)
        if ports_free(list(range(base, base + count))):
            return base
    raise Unavailable(f"no {count} consecutive free loopback ports after {settings.BENCH_PORT_ATTEMPTS_MAX} tries")


class ServerProcess:
    """One server process in its own process group, output to a log file."""

    def __init__(self, name: str, command: list[str], log_path: Path):
        self.name = name
        self.command = command
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def check_running(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            raise Unavailable(f"{self.name} exited with {code}; its log {self.log_path} ends with:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return log_tail(self.log_path)

    def kill(self) -> None:
        """SIGKILL by pid (the failover workload's kill -9)."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """SIGTERM by pid; SIGKILL of its process group when it takes longer than SERVER_STOP_TIMEOUT_MS."""
        stop_by_pid(self.proc, SERVER_STOP_TIMEOUT_MS / 1000)


def wait_for_port(server: ServerProcess, port: int) -> None:
    """Wait until `server` accepts TCP connections on `port`; fail early if it exits."""
    deadline = time.monotonic() + SERVER_READY_TIMEOUT_MS / 1000
    while True:
        server.check_running()
        try:
            with socket.create_connection((LOOPBACK, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise Unavailable(f"{server.name} not listening on {port} after "
                                  f"{SERVER_READY_TIMEOUT_MS} ms; log {server.log_path}") from None
            time.sleep(SERVER_POLL_MS / 1000)


class NatsCluster:
    """NATS_NODES nats-server processes with JetStream (file storage) routed to each other on loopback."""

    def __init__(self, root: Path, nodes: int = NATS_NODES):
        self.root = root
        self.binary = find_binary("nats-server")
        base = free_base_port(2 * nodes)
        self.client_ports = [base + i for i in range(nodes)]
        route_ports = [base + nodes + i for i in range(nodes)]
        self.servers: dict[str, ServerProcess] = {}
        for i in range(nodes):
            name = f"n{i + 1}"
            config = root / f"{name}.conf"
            config.write_text(nats_config(name, self.client_ports[i], route_ports[i], route_ports, root / name))
            self.servers[name] = ServerProcess(f"nats-server {name}", [self.binary, "-c", str(config)],
                                               root / f"{name}.log")

    def url(self, name: str) -> str:
        return f"nats://{LOOPBACK}:{self.client_ports[list(self.servers).index(name)]}"

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(self.url(name) for name in self.servers)

    def start(self) -> None:
        for server in self.servers.values():
            server.start()
        for server, port in zip(self.servers.values(), self.client_ports):
            wait_for_port(server, port)

    def kill(self, name: str) -> None:
        self.servers[name].kill()

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()


class RedisServer:
    """One redis-server on a free loopback port."""

    def __init__(self, root: Path, appendonly: str):
        self.binary = find_binary("redis-server")
        self.port = free_base_port(1)
        self.server = ServerProcess("redis-server", redis_command(self.binary, self.port, root, appendonly),
                                    root / "redis.log")

    def start(self) -> None:
        self.server.start()
        wait_for_port(self.server, self.port)

    def stop(self) -> None:
        self.server.stop()


@contextmanager
def temp_root(prefix: str) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def running_nats() -> Iterator[NatsCluster]:
    with temp_root("raftbus-bench-nats-") as root:
        cluster = NatsCluster(root)
        progress(f"starting {len(cluster.servers)} nats-server nodes in {root} on ports {cluster.client_ports}")
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()


@contextmanager
def running_redis(appendonly: str) -> Iterator[RedisServer]:
    with temp_root("raftbus-bench-redis-") as root:
        server = RedisServer(root, appendonly)
        progress(f"starting redis-server in {root} on port {server.port} (appendonly {appendonly})")
        try:
            server.start()
            yield server
        finally:
            server.stop()
