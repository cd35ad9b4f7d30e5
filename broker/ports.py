"""The ports a broker process or `raftbus dev` listens on: derived, checked free before anything starts, and when one
is taken, who answers there.

`raftbus dev` derives every port from --base-port, so a second cluster on another base collides nowhere: broker N
(1, 2, ...) listens for clients on base + 2(N-1), for Raft on base + 2(N-1) + 1, serves metrics on
base + METRICS_PORT_OFFSET + N - 1 (9570-9572 from the default base 7070) and the Kafka protocol on
base + KAFKA_PORT_OFFSET + N - 1 (9092-9094, Kafka's own, from 7070). A listener of another role gets an offset
of its own beside these. With --base-port 0 nothing is derived: dev holds 2N client and Raft ports the kernel
picks (`ReservedPorts`) for as long as it runs, and each broker binds its metrics and Kafka ports on port 0 and
reports them (unless --metrics-base-port or --kafka-base-port fix them).

Before starting anything, `check_free` binds each address as its server would (SO_REUSEADDR, so a port left in
TIME_WAIT by an earlier run counts as free) and, for the first one taken, asks what answers there: a raftbus
broker's client port tells its cluster id and broker id (ClusterStatus), its metrics port its broker id. A server
that binds beside a port held for it (`listen_reuse_port`: the port is held by `raftbus dev --base-port 0`, by a
broker given port 0, or by a test harness) is checked as it binds, with SO_REUSEPORT: the hold, bound but never
listening, is its own and counts as free; the port is taken when a bind with SO_REUSEPORT fails or when something
listens there already (another server of this user bound with SO_REUSEPORT: the kernel lets that bind succeed).
"""
from __future__ import annotations

import errno
import http.client
import re
import socket
import urllib.request
from dataclasses import dataclass

import grpc

from raftbus.broker.raft.hub import HELLO, MAGIC
from raftbus.client import errors, reachability
from raftbus.client.credentials import Credentials
from raftbus.client.router import is_transport_failure
from raftbus.client.wire import raftbus_pb2 as pb
from raftbus.client.wire import raftbus_pb2_grpc as pb_grpc

METRICS_PORT_OFFSET = 2500  # broker N's metrics port: base_port + 2500 + N - 1
KAFKA_PORT_OFFSET = 2022    # broker N's Kafka port: base_port + 2022 + N - 1
WHO_ANSWERS_TIMEOUT_S = 3.0  # how long the question to a taken port's owner may take (on the error path only)


@dataclass(frozen=True)
class Listener:
    role: str      # "client port of broker 1", "Raft port (raft_listen)", ...
    address: str   # host:port; port 0 (any free port) is never checked
    reuse_port: bool = False  # its server binds with SO_REUSEPORT, beside a hold on the port (listen_reuse_port)


@dataclass(frozen=True)
class DevBrokerPorts:
    """The ports of one `raftbus dev` broker (metrics or Kafka None: off; port 0: the broker binds one the kernel
    picks and reports it). `held`: its client and Raft ports are held by dev (--base-port 0) and the broker binds
    beside the hold (listen_reuse_port, which its Kafka port follows too)."""

    node_id: int
    client: int
    raft: int
    metrics: int | None
    kafka: int | None = None
    held: bool = False

    def listeners(self) -> list[Listener]:
        found = [Listener(f"client port of broker {self.node_id}", f"127.0.0.1:{self.client}", self.held),
                 Listener(f"Raft port of broker {self.node_id}", f"127.0.0.1:{self.raft}", self.held)]
        for role, port, reuse in (("metrics", self.metrics, False), ("Kafka", self.kafka, self.held)):
            if port is not None:
                found.append(Listener(f"{role} port of broker {self.node_id}", f"127.0.0.1:{port}", reuse))
        return found

    @property
    def ports(self) -> list[int]:
        """Its fixed ports (neither off nor port 0)."""
        return [p for p in (self.client, self.raft, self.metrics, self.kafka) if p]


def dev_broker_ports(count: int, base_port: int, metrics_base_port: int | None = None,
                     kafka_base_port: int | None = None, held: list[int] | None = None) -> list[DevBrokerPorts]:
    """Every port of `count` dev brokers from `base_port`; metrics (Kafka) from `metrics_base_port`
    (`kafka_base_port`) when given, 0 for none, else from base_port + METRICS_PORT_OFFSET (KAFKA_PORT_OFFSET).

    `base_port` 0: the client and Raft ports are `held` (2 per broker, in broker order: ports dev holds; 0 until it
    holds them), and metrics and Kafka, when their base port is not given, port 0 (each broker picks its own)."""
    picked = base_port == 0
    if held is not None and (not picked or len(held) != 2 * count):
        raise ValueError(f"held ports are for --base-port 0, 2 per broker: {count} brokers, {len(held)} ports")
    held = held or [0] * (2 * count)

    def derived(given: int | None, offset: int) -> list[int | None]:
        if given is None:
            return [0 if picked else base_port + offset + i for i in range(count)]
        return [given + i if given else None for i in range(count)]

    metrics, kafka = derived(metrics_base_port, METRICS_PORT_OFFSET), derived(kafka_base_port, KAFKA_PORT_OFFSET)
    if picked:
        return [DevBrokerPorts(i + 1, held[2 * i], held[2 * i + 1], metrics[i], kafka[i], held=True)
                for i in range(count)]
    return [DevBrokerPorts(i + 1, base_port + 2 * i, base_port + 2 * i + 1, metrics[i], kafka[i])
            for i in range(count)]


def dev_port_problem(count: int, base_port: int, metrics_base_port: int | None,
                     kafka_base_port: int | None = None) -> str | None:
    """Why these dev flags give no usable ports (out of range, or two roles on one port), or None."""
    if count < 1:
        return f"--brokers must be >= 1, not {count}"
    ports = [p for b in dev_broker_ports(count, base_port, metrics_base_port, kafka_base_port) for p in b.ports]
    if ports and (min(ports) < 1 or max(ports) > 65535):
        return f"--base-port {base_port} gives ports outside 1-65535 ({min(ports)}-{max(ports)})"
    if len(set(ports)) != len(ports):
        return "--metrics-base-port or --kafka-base-port overlaps another port of this cluster"
    return None


# ---------------------------------------------------------------------- is it free?

def bind_problem(address: str, reuse_port: bool = False) -> OSError | None:
    """The error binding `address` as a server would (None: free). Port 0 is always free. With `reuse_port` the
    bind is made beside whatever holds the port with SO_REUSEPORT, and a port something listens on is taken too."""
    host, port = reachability.split_address(address)
    if port == 0:
        return None
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return OSError(errno.EADDRNOTAVAIL, f"cannot resolve {host!r}: {exc.strerror}")
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            try:
                sock.bind(sockaddr)
            except OSError as exc:
                return exc
        if reuse_port and _listening(family, sockaddr):
            return OSError(errno.EADDRINUSE, "a server listens there")
    return None


def _listening(family: int, sockaddr: tuple) -> bool:
    """Whether a connection to `sockaddr` (a wildcard address: this host's loopback) is accepted. A hold bound
    without listening refuses it; a connection that times out counts as accepted (a full listen backlog)."""
    host = sockaddr[0]
    if host in ("0.0.0.0", "::"):
        host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(WHO_ANSWERS_TIMEOUT_S)
        try:
            sock.connect((host, *sockaddr[1:]))
        except ConnectionRefusedError:
            return False
        except OSError:
            return True
    return True


def check_free(listeners: list[Listener], *, hint: str, own_cluster_id: str = "") -> None:
    """Raise for the first listener whose address cannot be bound: AddressInUse naming who answers there, or
    InvalidArgument for an address this host cannot listen on. A listener with `reuse_port` is free on a port held
    for it (a hold nothing listens on, this process's or another's). `own_cluster_id` names a cluster that is this
    one (a `raftbus dev` of the same data dir still running)."""
    for listener in listeners:
        problem = bind_problem(listener.address, listener.reuse_port)
        if problem is None:
            continue
        if problem.errno == errno.EADDRINUSE:
            who = who_answers(listener.address, own_cluster_id)
            raise errors.AddressInUse(f"{listener.address} ({listener.role}) is in use by {who}; {hint}")
        raise errors.InvalidArgument(f"cannot listen on {listener.address} ({listener.role}): "
                                     f"{problem.strerror or problem}")


# ---------------------------------------------------------------------- who answers there?

def who_answers(address: str, own_cluster_id: str = "", timeout_s: float | None = None) -> str:
    """What listens at `address`, in words: a raftbus broker (its cluster id and broker id when it tells), a raftbus
    metrics endpoint, or another process; each question may take `timeout_s` (WHO_ANSWERS_TIMEOUT_S)."""
    timeout_s = WHO_ANSWERS_TIMEOUT_S if timeout_s is None else timeout_s
    raft_node = _raft_node_id(address, timeout_s)
    if raft_node is not None:
        return f"the Raft port of raftbus broker {raft_node}"
    found = reachability.probe(address, timeout_s)
    if not found.reachable or found.speaks_tls is None:
        return "another process"
    broker = _raftbus_broker(address, found.speaks_tls, own_cluster_id, timeout_s)
    if broker:
        return broker
    node = _metrics_broker_id(address, timeout_s)
    if node is not None:
        return f"the metrics endpoint of raftbus broker {node}"
    return "a TLS server (a raftbus cluster with TLS?)" if found.speaks_tls else "another process"


def _raftbus_broker(address: str, tls: bool, own_cluster_id: str, timeout_s: float) -> str | None:
    try:
        credentials = Credentials.of() if tls else Credentials(tls_ca=None)
    except errors.RaftbusError:
        return None
    if tls and not credentials.tls:
        return None  # no CA to talk to it with (RAFTBUS_TLS_CA)
    channel = credentials.channel(address, [])
    try:
        status = pb_grpc.AdminStub(channel).ClusterStatus(pb.ClusterStatusRequest(), timeout=timeout_s)
    except grpc.RpcError as exc:
        if is_transport_failure(exc) or exc.code() in (grpc.StatusCode.UNIMPLEMENTED,
                                                       grpc.StatusCode.DEADLINE_EXCEEDED):
            return None
        refused = errors.error_from_rpc(exc)
        return f"a raftbus broker that does not tell its cluster to this process ({refused.code})"
    finally:
        channel.close()
    if own_cluster_id and status.cluster_id == own_cluster_id:
        return (f"broker {status.answering_broker_id} of this data dir's own cluster (cluster_id "
                f"{status.cluster_id}), still running from an earlier start")
    return f"another raftbus cluster (cluster_id {status.cluster_id or '?'}, broker {status.answering_broker_id})"


def _raft_node_id(address: str, timeout_s: float) -> int | None:
    """The node id in the hello a raftbus Raft port sends first on every connection (without Raft TLS)."""
    try:
        with socket.create_connection(reachability.split_address(address), timeout=timeout_s / 4) as sock:
            hello = b""
            while len(hello) < HELLO.size:
                chunk = sock.recv(HELLO.size - len(hello))
                if not chunk:
                    break
                hello += chunk
    except OSError:  # no hello in time: not a Raft port (a gRPC or HTTP server waits for the client)
        return None
    if len(hello) < HELLO.size or not hello.startswith(MAGIC):
        return None
    return HELLO.unpack(hello)[1]


_BROKER_ID_SAMPLE = re.compile(r"^raftbus_broker_id(?:\{[^}]*\})? ([0-9.e+]+)$", re.MULTILINE)


def _metrics_broker_id(address: str, timeout_s: float) -> int | None:
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout_s) as answer:
            text = answer.read(4 * 1024 * 1024).decode("utf-8", errors="replace")
    except (OSError, ValueError, http.client.HTTPException):
        return None
    sample = _BROKER_ID_SAMPLE.search(text)
    return int(float(sample.group(1))) if sample else None
