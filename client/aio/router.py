"""The asyncio router: the sync Router's cache and retry decisions, with grpc.aio channels and coroutine calls.

AsyncRouter keeps the same partition → leader map (`ClusterMap`), follows NOT_LEADER hints and refreshes on
UNAVAILABLE through the very same `note_failure` / `retry_delay_s` as the sync Router; only the methods that
touch the network are coroutines here (`refresh`, the lookups that may refresh, and the `call_*` methods, whose
`fn` returns an awaitable). One AsyncRouter belongs to one event loop.
"""
from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from raftbus.client import settings
from raftbus.client.credentials import Credentials, TlsSource
from raftbus.client.errors import (LeaderNotAvailable, RaftbusError, TlsMismatch, Unavailable, UnknownTopic,
                                   error_from_rpc)
from raftbus.client.router import ClusterMap, Connection, Router, exponential_backoff_s
from raftbus.client.wire import raftbus_pb2 as pb
from raftbus.client.wire import raftbus_pb2_grpc as pb_grpc

T = TypeVar("T")
AsyncCall = Callable[[Connection], Awaitable[T]]


def aio_connect(address: str, credentials: Credentials = Credentials()) -> Connection:
    """A grpc.aio channel to `address` with raftbus's message-size limits (TLS and a bearer token when configured)."""
    limits = [("grpc.max_send_message_length", settings.GRPC_MESSAGE_BYTES_MAX),
              ("grpc.max_receive_message_length", settings.GRPC_MESSAGE_BYTES_MAX)]
    channel = credentials.aio_channel(address, limits)
    return Connection(address, channel, pb_grpc.LogStub(channel), pb_grpc.AdminStub(channel))


class AsyncRouter(Router):
    """Routes coroutine calls to partition leaders and the controller; see the module docstring."""

    def __init__(self, bootstrap: str | list[str] | None = None, *, tls_ca: TlsSource = None,
                 tls_cert: TlsSource = None, tls_key: TlsSource = None, token: str | None = None, **options):
        credentials = Credentials.of(tls_ca, tls_cert, tls_key, token)  # else the RAFTBUS_TLS_*/TOKEN_FILE variables
        super().__init__(bootstrap, connect=lambda address: aio_connect(address, credentials),
                         credentials=credentials, **options)
        self._refreshing: asyncio.Lock | None = None

    # ------------------------------------------------------------------ metadata (coroutines)

    async def refresh(self, topics: list[str] | None = None) -> ClusterMap:
        """Fetch metadata from the bootstrap addresses, then known brokers, until one answers; concurrent callers
        share refreshes as the sync Router's do, and addresses that all refuse connections are waited out as there
        (BrokerUnreachable after connect_timeout_ms)."""
        if self._refreshing is None:
            self._refreshing = asyncio.Lock()
        called = self._refreshes_started
        async with self._refreshing:
            if self._refreshed_since(called):
                return self._map
            self._refreshes_started += 1
            started = self._refreshes_started
            for attempt in itertools.count(1):
                candidates = self.candidates()
                fresh = await self._refresh_from_async(candidates, started)
                if isinstance(fresh, ClusterMap):
                    return fresh
                gone = self.unreachable(candidates)
                if gone is not None:
                    raise gone
                if not self.all_refusing(candidates):
                    raise fresh
                await asyncio.sleep(exponential_backoff_s(attempt, self.retry_backoff_s,
                                                          self.retry_backoff_leader_max_s))

    async def _refresh_from_async(self, candidates: list[str], started: int) -> "ClusterMap | RaftbusError":
        failure: RaftbusError = Unavailable(f"no broker answered among {candidates}")
        for address in candidates:
            try:
                answer = await self.connection(address).admin.GetMetadata(
                    pb.MetadataRequest(), timeout=self.request_timeout_s)
            except grpc.RpcError as exc:
                failure = await asyncio.to_thread(self.failure_at, address, exc)  # a probe may block
                if isinstance(failure, TlsMismatch):
                    raise failure
                continue
            self._reachability.reached(address)
            self._map = ClusterMap.from_proto(answer, self._clock())
            self._leader_hints.clear()
            self._controller_hint = None
            self._refreshed = started
            return self._map
        return failure

    def fresh_map(self) -> ClusterMap | None:
        """The cached map while it is younger than metadata_max_age_ms, else None (without refreshing)."""
        current = self._map
        return current if self._clock() - current.fetched_at_s <= self.metadata_max_age_s else None

    async def cluster_map(self) -> ClusterMap:
        return self.fresh_map() or await self.refresh()

    async def _topic_partitions(self, topic: str) -> dict:
        known = (await self.cluster_map()).topics.get(topic)
        if known is None:
            known = (await self.refresh()).topics.get(topic)
        if known is None:
            raise UnknownTopic(f"topic {topic!r} does not exist")
        return known

    async def partitions_for(self, topic: str) -> int:
        return len(await self._topic_partitions(topic))

    async def topic_kind(self, topic: str) -> str:
        await self._topic_partitions(topic)
        return self._map.kinds.get(topic) or (await self.refresh()).kinds[topic]

    async def leader_address(self, topic: str, partition: int) -> str:
        hinted = self._leader_hints.get((topic, partition))
        if hinted:
            return hinted
        found = self._lookup_leader(await self.cluster_map(), topic, partition)
        if found is None:
            await self._topic_partitions(topic)
            found = self._lookup_leader(await self.refresh(), topic, partition)
        if found is None:
            raise LeaderNotAvailable(f"{topic}/{partition} has no leader right now")
        return found

    async def controller_address(self) -> str:
        if self._controller_hint:
            return self._controller_hint
        for current in (await self.cluster_map(), None):
            current = current or await self.refresh()
            if current.controller_id and current.controller_id in current.brokers:
                return current.brokers[current.controller_id]
        raise LeaderNotAvailable("the cluster has no controller right now")

    # ------------------------------------------------------------------ calls (coroutines)

    async def call_partition(self, topic: str, partition: int, fn: AsyncCall) -> T:
        """Await `fn` (one RPC) on the partition's leader, following hints and retrying retriable errors."""
        return await self._retrying(lambda: self.leader_address(topic, partition), fn,
                                    dict(topic=topic, partition=partition))

    async def call_at(self, address: str, fn: AsyncCall) -> T:
        """Await `fn` (one RPC) once on `address`: its answer, or its typed error raised (no retry: the caller
        decides, with note_failure)."""
        try:
            answer = await fn(self.connection(address))
        except grpc.RpcError as exc:
            raise await asyncio.to_thread(self.failure_at, address, exc) from None
        self._reachability.reached(address)
        return answer

    async def call_controller(self, fn: AsyncCall) -> T:
        return await self._retrying(self.controller_address, fn, {})

    async def call_any(self, fn: AsyncCall) -> T:
        """Await `fn` on any broker, moving to the next known one after a failure."""
        turn = 0

        async def next_broker() -> str:
            known = list(dict.fromkeys([*self.bootstrap, *self._map.brokers.values()]))
            return known[turn % len(known)]

        async def rotating(conn: Connection):
            nonlocal turn
            try:
                return await fn(conn)
            except (grpc.RpcError, Unavailable):
                turn += 1
                raise

        return await self._retrying(next_broker, rotating, dict(any_broker=True))

    async def _retrying(self, address_of: Callable[[], Awaitable[str]], fn: AsyncCall, where: dict) -> T:
        deadline_s = self._clock() + self.request_timeout_s
        for attempt in range(1, self.retries + 2):
            address = None
            try:
                address = await address_of()
                answer = await fn(self.connection(address))
            except grpc.RpcError as exc:
                failure = (error_from_rpc(exc) if address is None
                           else await asyncio.to_thread(self.failure_at, address, exc))
            except RaftbusError as exc:
                failure = exc
            else:
                self._reachability.reached(address)
                return answer
            delay_s = self.retry_delay_s(failure, attempt, deadline_s, **where)
            if delay_s:
                await asyncio.sleep(delay_s)
        raise failure

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        """Close every pooled channel."""
        self._closed = True
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(conn.channel.close() for conn in connections), return_exceptions=True)
