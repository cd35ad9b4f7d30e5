"""Client-side routing: a cached partition → leader map, pooled gRPC channels, and retries that follow hints.

grpcio has no pluggable name resolver, so the SDK keeps the map itself (from Admin.GetMetadata), sends each
call to the right broker, follows NOT_LEADER hints at once and refreshes the map on other retriable errors.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from boltons.iterutils import backoff

from raftbus.client import reachability, settings
from raftbus.client.credentials import Credentials, TlsSource
from raftbus.client.errors import (
    CODE_KEY,
    BrokerUnreachable,
    LeaderNotAvailable,
    NotLeader,
    OutOfOrderSequence,
    Overloaded,
    RaftbusError,
    RequestTimedOut,
    TlsMismatch,
    Unavailable,
    UnknownPartition,
    UnknownProducerId,
    UnknownTopic,
    error_from_rpc,
)
from raftbus.client.wire import raftbus_pb2 as pb
from raftbus.client.wire import raftbus_pb2_grpc as pb_grpc

T = TypeVar("T")

# NOT_LEADER hints followed with no delay within one call; later ones back off like other retriable errors.
HINTS_FOLLOWED_AT_ONCE = 2

# Errors the router retries itself; every other error goes straight back to the caller.
ROUTER_RETRIABLE = (NotLeader, LeaderNotAvailable, Unavailable, RequestTimedOut, Overloaded)
# Of those, the ones that mean a leader change in progress: retried at the shorter backoff cap.
LEADER_CHANGE = (NotLeader, LeaderNotAvailable, Unavailable)
# A partition's refusals of an idempotent producer's sequences: the producer's lane answers them, after a backoff.
PRODUCER_SEQUENCE = (OutOfOrderSequence, UnknownProducerId)


def is_transport_failure(exc: grpc.RpcError) -> bool:
    """Whether a failed call never reached a raftbus servicer: UNAVAILABLE from gRPC itself (no raftbus code)."""
    status = exc.code() if hasattr(exc, "code") else None
    metadata = dict(exc.trailing_metadata() or ()) if hasattr(exc, "trailing_metadata") else {}
    return status == grpc.StatusCode.UNAVAILABLE and CODE_KEY not in metadata


def exponential_backoff_s(attempt: int, base_s: float, max_s: float) -> float:
    """The delay before retry `attempt` (1 for the first): base_s doubling per attempt, capped at max_s."""
    if base_s <= 0 or attempt < 1:
        return 0.0
    return backoff(base_s, max(base_s, max_s), count=attempt)[-1]


@dataclass(slots=True)
class Connection:
    """A pooled channel to one broker with its stubs; what `fn` receives in the call_* methods."""

    address: str
    channel: Any
    log: Any
    admin: Any

    def close(self) -> None:
        self.channel.close()


def grpc_connect(address: str, credentials: Credentials = Credentials()) -> Connection:
    """Open a channel to `address` with raftbus's message-size limits (TLS and a bearer token when configured)."""
    options = [
        ("grpc.max_send_message_length", settings.GRPC_MESSAGE_BYTES_MAX),
        ("grpc.max_receive_message_length", settings.GRPC_MESSAGE_BYTES_MAX),
        ("grpc.initial_reconnect_backoff_ms", settings.RECONNECT_BACKOFF_MS),
        ("grpc.max_reconnect_backoff_ms", settings.RECONNECT_BACKOFF_MAX_MS),
    ]
    channel = credentials.channel(address, options)
    return Connection(address, channel, pb_grpc.LogStub(channel), pb_grpc.AdminStub(channel))


@dataclass(slots=True)
class PartitionRoute:
    leader_id: int
    replicas: tuple[int, ...]


@dataclass(slots=True)
class ClusterMap:
    """The cached metadata: brokers id → address, topics → partitions → leader, and the controller."""

    brokers: dict[int, str] = field(default_factory=dict)
    topics: dict[str, dict[int, PartitionRoute]] = field(default_factory=dict)
    controller_id: int = 0
    fetched_at_s: float = float("-inf")
    kinds: dict[str, str] = field(default_factory=dict)  # topic -> "stream" or "queue"

    @classmethod
    def from_proto(cls, response: pb.MetadataResponse, now_s: float) -> "ClusterMap":
        brokers = {b.broker_id: b.address for b in response.brokers}
        topics = {
            t.name: {p.partition: PartitionRoute(p.leader_id, tuple(p.replicas)) for p in t.partitions}
            for t in response.topics
        }
        kinds = {t.name: t.kind for t in response.topics}
        return cls(brokers, topics, response.controller_id, now_s, kinds)


class Router:
    """Routes calls to partition leaders and the controller over pooled channels; thread-safe."""

    def __init__(
        self,
        bootstrap: str | list[str] | None = None,
        *,
        request_timeout_ms: int = settings.REQUEST_TIMEOUT_MS,
        metadata_max_age_ms: int = settings.METADATA_MAX_AGE_MS,
        retries: int = settings.RETRIES,
        retry_backoff_ms: int = settings.RETRY_BACKOFF_MS,
        retry_backoff_max_ms: int = settings.RETRY_BACKOFF_MAX_MS,
        retry_backoff_leader_max_ms: int = settings.RETRY_BACKOFF_LEADER_MAX_MS,
        connect_timeout_ms: int = settings.CONNECT_TIMEOUT_MS,
        connect: Callable[[str], Connection] | None = None,
        tls_ca: TlsSource = None,
        tls_cert: TlsSource = None,
        tls_key: TlsSource = None,
        token: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        probe: Callable[[str, float], reachability.Probe] = reachability.probe,
        credentials: Credentials | None = None,
    ):
        self.bootstrap = settings.parse_bootstrap(bootstrap or settings.bootstrap_default())
        self.request_timeout_s = request_timeout_ms / 1000
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        self.retries = retries
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.retry_backoff_max_s = retry_backoff_max_ms / 1000
        self.retry_backoff_leader_max_s = min(retry_backoff_leader_max_ms, retry_backoff_max_ms) / 1000
        if connect is None:  # see client/credentials.py: arguments, else the RAFTBUS_* environment
            credentials = Credentials.of(tls_ca, tls_cert, tls_key, token)
            connect = lambda address: grpc_connect(address, credentials)  # noqa: E731
        self._connect = connect
        # What the connection path knows of its own channels (None: a custom `connect`, no TLS diagnosis).
        self._credentials = credentials
        self.connect_timeout_s = connect_timeout_ms / 1000
        self._probe = probe
        self._reachability = reachability.Reachability(clock)
        self._sleep = sleep
        self._clock = clock
        self._lock = threading.RLock()
        self._refresh_lock = threading.Lock()
        self._refreshes_started = 0  # refreshes begun so far (refresh lock held to change it)
        self._refreshed = 0  # the number of the last refresh that completed
        self._map = ClusterMap()
        # Counts the maps fetched so far: whoever derives figures from the map (the Producer's partition counts
        # per topic) reuses them while this stays the same.
        self.map_version = 0
        self._leader_hints: dict[tuple[str, int], str] = {}  # address hints for leaders not in the broker map
        self._controller_hint: str | None = None
        self._connections: dict[str, Connection] = {}
        self._closed = False

    # ------------------------------------------------------------------ connections and metadata

    def connection(self, address: str) -> Connection:
        """The pooled connection to `address`, opened on first use."""
        with self._lock:
            if self._closed:
                raise Unavailable("router is closed")
            conn = self._connections.get(address)
            if conn is None:
                conn = self._connections[address] = self._connect(address)
            return conn

    def refresh(self, topics: list[str] | None = None) -> ClusterMap:
        """Fetch metadata from the bootstrap addresses, then known brokers, until one answers.

        Refreshes run one at a time; a caller that waited while another ran takes the map of a refresh that
        started after its own call, if one has completed meanwhile (it is as fresh as one of its own): when many
        partitions fail over at once, their retries share one request. While every address refuses connections,
        it tries again (retry_backoff_ms apart) until each has refused for connect_timeout_ms, then raises
        BrokerUnreachable: every caller meets a closed bootstrap address the same way."""
        called = self._refreshes_started
        with self._refresh_lock:
            if self._refreshed_since(called):
                with self._lock:
                    return self._map
            self._refreshes_started += 1
            started = self._refreshes_started
            for attempt in itertools.count(1):
                candidates = self.candidates()
                fresh = self._refresh_from(candidates, started)
                if isinstance(fresh, ClusterMap):
                    return fresh
                gone = self.unreachable(candidates)
                if gone is not None:
                    raise gone
                if not self.all_refusing(candidates):
                    raise fresh
                self._sleep(exponential_backoff_s(attempt, self.retry_backoff_s, self.retry_backoff_leader_max_s))

    def _refresh_from(self, candidates: list[str], started: int) -> "ClusterMap | RaftbusError":
        """The map from the first of `candidates` that answers, or the last failure (TlsMismatch is raised)."""
        last: RaftbusError = Unavailable(f"no broker answered among {candidates}")
        for address in candidates:
            try:
                response = self.connection(address).admin.GetMetadata(
                    pb.MetadataRequest(), timeout=self.request_timeout_s
                )
            except grpc.RpcError as exc:
                last = self.failure_at(address, exc)
                if isinstance(last, TlsMismatch):
                    raise last
                continue
            self._reachability.reached(address)
            fresh = ClusterMap.from_proto(response, self._clock())
            with self._lock:
                self._map = fresh
                self.map_version += 1
                self._leader_hints.clear()
                self._controller_hint = None
            self._refreshed = started
            return fresh
        return last

    def _refreshed_since(self, called: int) -> bool:
        """Whether a refresh that started after the one numbered `called` has completed (refresh lock held)."""
        return self._refreshed > called

    def cluster_map(self) -> ClusterMap:
        """The cached map, refreshed first when older than metadata_max_age_ms."""
        with self._lock:
            current = self._map
        if self._clock() - current.fetched_at_s > self.metadata_max_age_s:
            return self.refresh()
        return current

    def partitions_for(self, topic: str) -> int:
        """How many partitions `topic` has (refreshing once if it is not known yet)."""
        partitions = self.cluster_map().topics.get(topic)
        if partitions is None:
            partitions = self.refresh().topics.get(topic)
        if partitions is None:
            raise UnknownTopic(f"topic {topic!r} does not exist")
        return len(partitions)

    def topic_kind(self, topic: str) -> str:
        """"stream" or "queue" (refreshing once if the topic is not known yet); UnknownTopic if none."""
        kind = self.cluster_map().kinds.get(topic)
        if kind is None:
            kind = self.refresh().kinds.get(topic)
        if kind is None:
            raise UnknownTopic(f"topic {topic!r} does not exist")
        return kind

    def leader_address(self, topic: str, partition: int) -> str:
        """The client address of the partition's leader; refreshes the map when the leader is unknown."""
        with self._lock:
            hint = self._leader_hints.get((topic, partition))
        if hint:
            return hint
        address = self._lookup_leader(self.cluster_map(), topic, partition)
        if address is None:
            cmap = self.refresh()
            if topic not in cmap.topics:
                raise UnknownTopic(f"topic {topic!r} does not exist")
            address = self._lookup_leader(cmap, topic, partition)
        if address is None:
            raise LeaderNotAvailable(f"{topic}/{partition} has no leader right now")
        return address

    @staticmethod
    def _lookup_leader(cmap: ClusterMap, topic: str, partition: int) -> str | None:
        partitions = cmap.topics.get(topic)
        if partitions is None:
            return None
        route = partitions.get(partition)
        if route is None:
            raise UnknownPartition(f"topic {topic!r} has no partition {partition} (it has {len(partitions)})")
        return cmap.brokers.get(route.leader_id) if route.leader_id else None

    def controller_address(self) -> str:
        """The client address of the metadata-group leader (the controller)."""
        with self._lock:
            if self._controller_hint:
                return self._controller_hint
        cmap = self.cluster_map()
        address = cmap.brokers.get(cmap.controller_id) if cmap.controller_id else None
        if address is None:
            cmap = self.refresh()
            address = cmap.brokers.get(cmap.controller_id) if cmap.controller_id else None
        if address is None:
            raise LeaderNotAvailable("the cluster has no controller right now")
        return address

    # ------------------------------------------------------------------ connection failures

    def failure_at(self, address: str, exc: grpc.RpcError) -> RaftbusError:
        """The typed error of a call to `address` that failed with `exc`. A transport failure is explained by a
        probe of the address (client/reachability.py): a refused connection (its streak counts toward
        connect_timeout_ms), or TlsMismatch when the broker's TLS does not fit this client's."""
        err = error_from_rpc(exc)
        if not is_transport_failure(exc):
            return err
        found = self._probe(address, self.connect_timeout_s)
        if not found.reachable:
            self._reachability.refused(address)
            return Unavailable(f"cannot connect to {address}: {found.reason}")
        self._reachability.reached(address)
        return self._tls_mismatch(address, found) or err

    def _tls_mismatch(self, address: str, found: reachability.Probe) -> TlsMismatch | None:
        credentials = self._credentials
        if credentials is None or found.speaks_tls is None:
            return None
        if found.speaks_tls and not credentials.tls:
            return TlsMismatch(f"the broker at {address} speaks TLS; pass --tls-ca FILE (tls_ca= in the SDK, "
                               "RAFTBUS_TLS_CA) with the CA that signed its certificate")
        if not found.speaks_tls and credentials.tls:
            return TlsMismatch(f"the broker at {address} does not speak TLS; drop --tls-ca and --tls-cert "
                               "(tls_ca=, tls_cert= in the SDK; RAFTBUS_TLS_CA, RAFTBUS_TLS_CERT)")
        if found.speaks_tls:
            problem = reachability.certificate_problem(address, credentials.tls_ca, self.connect_timeout_s)
            if problem:
                return TlsMismatch(f"the certificate of the broker at {address} does not verify against the CA "
                                   f"given (--tls-ca, tls_ca=): {problem}")
        return None

    def candidates(self) -> list[str]:
        """The addresses a refresh or an any-broker call tries: the bootstrap list, then the known brokers."""
        with self._lock:
            return list(dict.fromkeys([*self.bootstrap, *self._map.brokers.values()]))

    def all_refusing(self, candidates: list[str]) -> bool:
        """Whether every one of `candidates` refused its last connection attempt (none has answered since)."""
        return bool(candidates) and all(self._reachability.refusing_for_s(a) is not None for a in candidates)

    def unreachable(self, candidates: list[str]) -> BrokerUnreachable | None:
        """BrokerUnreachable when every one of `candidates` has refused connections for connect_timeout_ms."""
        refusing = {a: self._reachability.refusing_for_s(a) for a in candidates}
        if not candidates or any(s is None or s < self.connect_timeout_s for s in refusing.values()):
            return None
        return BrokerUnreachable(
            f"cannot connect to {', '.join(candidates)} (connection refused or timed out for "
            f"{self.connect_timeout_s:g} s, connect_timeout_ms): is the cluster up and the address right "
            "(--bootstrap, RAFTBUS_BOOTSTRAP)?")

    # ------------------------------------------------------------------ failures

    def note_failure(self, err: RaftbusError, attempt: int, *, topic: str | None = None,
                     partition: int | None = None) -> float | None:
        """Learn from a failed call; return the delay before retrying, or None when it must not be retried.

        A NOT_LEADER hint updates the cache and retries at once (delay 0, for the first HINTS_FOLLOWED_AT_ONCE
        failures; then with backoff); other router-retriable errors forget the cached leader (so the next lookup
        refreshes) and back off exponentially.
        `attempt` counts failures so far (1 for the first); past `retries` nothing is retried.
        """
        if not isinstance(err, ROUTER_RETRIABLE) or attempt > self.retries:
            return None
        if isinstance(err, NotLeader) and self._apply_hint(err, topic, partition):
            # Straight to the hinted leader; if hints keep bouncing (brokers mid-election disagree), back off.
            return 0.0 if attempt <= HINTS_FOLLOWED_AT_ONCE else self._backoff_s(attempt - HINTS_FOLLOWED_AT_ONCE, err)
        self._forget_leader(topic, partition)
        return self._backoff_s(attempt, err)

    def produce_retry_delay_s(self, err: RaftbusError, attempt: int, *, topic: str, partition: int) -> float | None:
        """The wait before a produce or enqueue batch refused with `err` goes again, or None when it fails for good.

        OUT_OF_ORDER_SEQUENCE and UNKNOWN_PRODUCER_ID come from the partition's leader about the producer's own
        sequences: the producer's lane resends the earlier batches first or starts over under a fresh producer id
        (client/producer_lane.py), so they back off exponentially without forgetting the leader or counting
        against `retries`. Every other error is `note_failure`'s."""
        if isinstance(err, PRODUCER_SEQUENCE):
            return exponential_backoff_s(attempt, self.retry_backoff_s, self.retry_backoff_max_s)
        return self.note_failure(err, attempt, topic=topic, partition=partition)

    def _backoff_s(self, attempt: int, err: RaftbusError | None = None) -> float:
        """retry_backoff_ms doubling per attempt, capped at retry_backoff_leader_max_ms while the leader is unknown
        or unreachable (NOT_LEADER, LEADER_NOT_AVAILABLE, UNAVAILABLE: an election ends within the election
        timeout, so a retry soon after it finds the new leader), else at retry_backoff_max_ms (OVERLOADED,
        REQUEST_TIMED_OUT: a busy broker is given room)."""
        cap_s = self.retry_backoff_leader_max_s if isinstance(err, LEADER_CHANGE) else self.retry_backoff_max_s
        return exponential_backoff_s(attempt, self.retry_backoff_s, cap_s)

    def _apply_hint(self, err: NotLeader, topic: str | None, partition: int | None) -> bool:
        with self._lock:
            address = err.leader_address or self._map.brokers.get(err.leader_id or 0)
            if not address:
                return False
            if err.leader_id and err.leader_address:
                self._map.brokers[err.leader_id] = err.leader_address
            if topic is None:
                self._controller_hint = address
                if err.leader_id:
                    self._map.controller_id = err.leader_id
                return True
            route = self._map.topics.get(topic, {}).get(partition)
            if route is not None and err.leader_id:
                route.leader_id = err.leader_id
                self._leader_hints.pop((topic, partition), None)
            else:
                self._leader_hints[(topic, partition)] = address
            return True

    def _forget_leader(self, topic: str | None, partition: int | None) -> None:
        with self._lock:
            if topic is None:
                self._controller_hint = None
                self._map.controller_id = 0
                return
            self._leader_hints.pop((topic, partition), None)
            route = self._map.topics.get(topic, {}).get(partition)
            if route is not None:
                route.leader_id = 0

    # ------------------------------------------------------------------ calls

    def call_partition(self, topic: str, partition: int, fn: Callable[[Connection], T]) -> T:
        """Run `fn` (one RPC) against the partition's leader, following hints and retrying retriable errors."""
        return self._call(lambda: self.leader_address(topic, partition), fn, topic=topic, partition=partition)

    def call_at(self, address: str, fn: Callable[[Connection], T]) -> T:
        """Run `fn` (one RPC) once against `address`: its answer, or its typed error raised (no retry: the caller
        decides, with note_failure)."""
        try:
            answer = fn(self.connection(address))
        except grpc.RpcError as exc:
            raise self.failure_at(address, exc) from None
        self._reachability.reached(address)
        return answer

    def call_controller(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` against the controller (the metadata-group leader)."""
        return self._call(self.controller_address, fn)

    def call_any(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` against any broker, moving to the next known one when a broker is unreachable."""
        rotation = [0]

        def pick() -> str:
            with self._lock:
                candidates = list(dict.fromkeys([*self.bootstrap, *self._map.brokers.values()]))
            address = candidates[rotation[0] % len(candidates)]
            return address

        def fn_rotating(conn: Connection) -> T:
            try:
                return fn(conn)
            except (grpc.RpcError, Unavailable):
                rotation[0] += 1
                raise

        return self._call(pick, fn_rotating, any_broker=True)

    def _call(self, address_of: Callable[[], str], fn: Callable[[Connection], T], *, topic: str | None = None,
              partition: int | None = None, any_broker: bool = False) -> T:
        deadline = self._clock() + self.request_timeout_s
        attempt = 0
        while True:
            address = None
            try:
                address = address_of()
                answer = fn(self.connection(address))
            except grpc.RpcError as exc:
                err = self.failure_at(address, exc) if address is not None else error_from_rpc(exc)
            except RaftbusError as exc:
                err = exc
            else:
                self._reachability.reached(address)
                return answer
            attempt += 1
            delay = self.retry_delay_s(err, attempt, deadline, topic=topic, partition=partition,
                                       any_broker=any_broker)
            if delay:
                self._sleep(delay)

    def retry_delay_s(self, err: RaftbusError, attempt: int, deadline_s: float, *, topic: str | None = None,
                      partition: int | None = None, any_broker: bool = False) -> float:
        """The wait before attempt `attempt + 1` of a call that failed with `err`; raises `err` when the call must
        not be retried (not retriable, out of retries, or the wait would pass `deadline_s`); BrokerUnreachable has
        waited its connect_timeout_ms already and TlsMismatch is a setting to fix, so neither is retried here."""
        if any_broker and type(err) is Unavailable:  # every broker tried in turn: maybe none is reachable
            err = self.unreachable(self.candidates()) or err
        if isinstance(err, (BrokerUnreachable, TlsMismatch)):
            raise err
        if any_broker:
            delay = self._any_broker_delay(err, attempt)
        else:
            delay = self.note_failure(err, attempt, topic=topic, partition=partition)
        if delay is None or self._clock() + delay > deadline_s:
            raise err
        return delay

    def _any_broker_delay(self, err: RaftbusError, attempt: int) -> float | None:
        if not isinstance(err, (Unavailable, RequestTimedOut, Overloaded, LeaderNotAvailable)):
            return None
        if attempt > self.retries:
            return None
        return self._backoff_s(attempt, err)

    def close(self) -> None:
        """Close every pooled channel."""
        with self._lock:
            self._closed = True
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            try:
                conn.close()
            except Exception:  # closing is best effort
                pass

    def __enter__(self) -> "Router":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
