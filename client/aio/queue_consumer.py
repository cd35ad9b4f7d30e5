"""AsyncQueueConsumer: leases messages of queue topics from asyncio code and settles them in batches.

    async with AsyncQueueConsumer("127.0.0.1:7070", topics=["jobs"]) as consumer:
        async for message in consumer:
            await message.ack()          # or nack(delay_ms=...), extend(visibility_ms)

As the sync QueueConsumer: one LeaseStream per partition on its leader delivers messages as they become due,
with at most `prefetch` unsettled leases per partition; a failed stream is reopened on the new leader once the
consumer holds fewer than `prefetch` leases of the partition (leases are replicated, so those handed out stay
valid). ack(), nack() and extend() return asyncio futures; each partition's pending settlements go as one request
every `ack_linger_ms`, acks and nacks with the settler id and a sequence so a retried request is answered as the
first one was. A task keeps the held leases alive with one Extend per partition and poll hands out no message
whose lease is about to end, as the sync consumer does (client/queues/leases.py).
"""
from __future__ import annotations

import asyncio
import collections
import itertools
import os
from collections.abc import AsyncIterator

import grpc

from raftbus.client import settings
from raftbus.client.credentials import TlsSource
from raftbus.client.errors import (
    RaftbusError,
    RequestTimedOut,
    Unavailable,
    WrongTopicKind,
)
from raftbus.client.produce_stream import response_error
from raftbus.client.wire import queues_pb2 as qpb
from raftbus.client.wire import queues_pb2_grpc as qpb_grpc

from raftbus.client.aio.lifecycle import AsyncClient, typed
from raftbus.client.aio.router import AsyncRouter
from raftbus.client.aio.shared import (
    ENDING_REASON,
    KeptSettler,
    LeaseCounts,
    LeaseKeeper,
    LeasePolicy,
    Message,
    check_consumer_options,
    keep_leases_round,
    leased_messages,
    now_ms,
    settle_entries,
    settlement_request,
)


class AsyncSettlements:
    """Pending acks, nacks and extends, sent per (kind, topic, partition) as one request: one task collects what is
    pending every linger, one task per partition sends that partition's requests in order."""

    def __init__(self, router: AsyncRouter, linger_s: float):
        self.router = router
        self.linger_s = linger_s
        self.settler_id = os.urandom(16)
        self._sequences: dict[tuple[str, int], itertools.count] = {}
        self._pending: list[tuple[str, Message, object, asyncio.Future]] = []
        self._arrived = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = False
        self._task: asyncio.Task | None = None
        self._lanes: dict[tuple[str, int], collections.deque] = {}  # a partition's requests waiting to be sent
        self._lanes_running: dict[tuple[str, int], asyncio.Task] = {}

    def ack(self, message: Message) -> asyncio.Future:
        return self._add("Ack", message, None)

    def nack(self, message: Message, delay_ms: int | None, reason: str) -> asyncio.Future:
        return self._add("Nack", message, (delay_ms, reason))

    def extend(self, message: Message, visibility_ms: int) -> asyncio.Future:
        return self._add("Extend", message, visibility_ms)

    def extend_many(self, messages: list[Message], visibility_ms: int) -> list[asyncio.Future]:
        """Extends of one partition's leases, pending together so they go as one request."""
        return [self._add("Extend", message, visibility_ms) for message in messages]

    def _add(self, kind: str, message: Message, argument) -> asyncio.Future:
        if self._closing:
            raise Unavailable("consumer is closed")
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        future = asyncio.get_running_loop().create_future()
        self._pending.append((kind, message, argument, future))
        self._idle.clear()
        self._arrived.set()
        return future

    async def flush(self) -> None:
        await self._idle.wait()

    async def close(self, timeout_s: float | None) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                await self.flush()
        finally:
            self._closing = True
            tasks = [t for t in (self._task, *self._lanes_running.values()) if t is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._arrived.wait()
            if len(self._pending) < settings.QUEUE_BATCH_MESSAGES_MAX:
                await asyncio.sleep(self.linger_s)
            self._arrived.clear()
            taken, self._pending = self._pending, []
            requests: dict[tuple[str, int], dict[str, list]] = {}
            for entry in taken:
                requests.setdefault((entry[1].topic, entry[1].partition), {}).setdefault(entry[0], []).append(entry)
            step = settings.QUEUE_BATCH_MESSAGES_MAX
            for tp, kinds in requests.items():
                lane = self._lanes.setdefault(tp, collections.deque())
                for kind, entries in kinds.items():
                    lane.extend((kind, entries[start:start + step]) for start in range(0, len(entries), step))
                if tp not in self._lanes_running:
                    self._lanes_running[tp] = asyncio.get_running_loop().create_task(self._drain(tp))
            self._check_idle()

    async def _drain(self, tp: tuple[str, int]) -> None:
        """A partition's requests one after the other (the broker recognises a retry of a settler's last batch
        only), each partition on a task of its own: a partition whose leader is gone delays its own settlements
        only, never the acks and lease renewals of the others."""
        try:
            lane = self._lanes[tp]
            while lane:
                kind, entries = lane.popleft()
                await self._send(kind, *tp, entries)
        finally:
            self._lanes_running.pop(tp, None)
            if not self._lanes.get(tp):
                self._lanes.pop(tp, None)
            self._check_idle()

    def _check_idle(self) -> None:
        if not self._pending and not self._lanes_running:
            self._idle.set()

    async def _send(self, kind: str, topic: str, partition: int, entries: list) -> None:
        request = settlement_request(kind, topic, partition, entries)
        if kind != "Extend":  # acks and nacks carry a batch number, so a retry is answered as the first attempt
            request.settler_id = self.settler_id
            request.sequence = next(self._sequences.setdefault((topic, partition), itertools.count(1)))
        timeout_s = self.router.request_timeout_s
        try:
            answer = await self.router.call_partition(
                topic, partition, lambda conn: getattr(qpb_grpc.QueueStub(conn.channel), kind)(request,
                                                                                                timeout=timeout_s))
        except Exception as exc:  # typed errors as they are; anything else fails the entries as Unavailable
            err = exc if isinstance(exc, RaftbusError) else Unavailable(f"{kind} failed: {exc!r}")
            for *_, future in entries:
                future.set_exception(err)
            return
        settle_entries(kind, entries, answer)


class AsyncQueueConsumer(AsyncClient):
    """Consumes queue topics: `poll` (or `async for`) leased messages, then ack/nack/extend each one.

    Without `partitions` it follows whole topics, looking for added partitions every `partitions_check_ms`.
    Leases are kept alive as QueueConsumer keeps them (`lease_extension_max_ms`, `lease_extension_margin_ms`,
    `lease_handoff_margin_ms`; `lease_counts()`).
    """

    def __init__(self, bootstrap: str | list[str] | None = None, *, topics: list[str] | str,
                 partitions: list[int] | None = None, visibility_ms: int = settings.QUEUE_VISIBILITY_MS,
                 prefetch: int = settings.QUEUE_PREFETCH_MESSAGES, ack_linger_ms: int = settings.QUEUE_ACK_LINGER_MS,
                 lease_batch_messages: int = settings.QUEUE_LEASE_BATCH_MESSAGES,
                 request_timeout_ms: int = settings.REQUEST_TIMEOUT_MS,
                 partitions_check_ms: int = settings.QUEUE_PARTITIONS_CHECK_MS,
                 lease_extension_max_ms: int = settings.QUEUE_LEASE_EXTENSION_MAX_MS,
                 lease_extension_margin_ms: int | None = None, lease_handoff_margin_ms: int | None = None,
                 tls_ca: TlsSource = None, tls_cert: TlsSource = None, tls_key: TlsSource = None,
                 token: str | None = None):
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        check_consumer_options(self.topics, prefetch, lease_batch_messages, partitions_check_ms)
        policy = LeasePolicy.of(visibility_ms, lease_extension_max_ms, lease_extension_margin_ms,
                                lease_handoff_margin_ms)
        self.router = AsyncRouter(bootstrap, request_timeout_ms=request_timeout_ms,
                                  tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token)
        self.partitions = partitions
        self.visibility_ms = visibility_ms
        self.prefetch = prefetch
        self.lease_batch_messages = min(lease_batch_messages, prefetch)
        self.partitions_check_s = partitions_check_ms / 1000
        self.settlements = AsyncSettlements(self.router, ack_linger_ms / 1000)
        self._room: asyncio.Event | None = None  # set when held leases are released: a stream may reopen
        self.leases = LeaseKeeper(policy, on_released=self._released)
        self._settler = KeptSettler(self.settlements, self.leases, now_ms)
        self._buffer: asyncio.Queue[Message] = asyncio.Queue()
        self._streams: dict[tuple[str, int], asyncio.Task] = {}
        self._watcher: asyncio.Task | None = None
        self._keeper: asyncio.Task | None = None
        self._failure: RaftbusError | None = None
        self._started = False
        self._closed = False

    # ------------------------------------------------------------------ public API

    async def start(self) -> None:
        """Check the topics are queue topics and open a lease stream per partition (poll does it when needed)."""
        if self._started:
            return
        self._started = True
        for topic in self.topics:
            if await self.router.topic_kind(topic) != "queue":
                raise WrongTopicKind(f"{topic!r} is a stream topic; read it with AsyncReader (or AsyncConsumer)")
        self._room = asyncio.Event()
        self._keeper = asyncio.get_running_loop().create_task(self._keep_leases())
        await self._open_streams()
        if self.partitions is None:
            self._watcher = asyncio.get_running_loop().create_task(self._watch_partitions())

    async def poll(self, timeout_s: float = 1.0, max_messages: int = settings.QUEUE_POLL_MESSAGES_MAX) -> list[Message]:
        """Up to max_messages leased messages, waiting up to timeout_s for the first one. A message whose lease
        ends within the hand-off margin is given back instead (nack, no delay), one whose lease ended dropped, one
        whose renewal is still unanswered kept in the buffer for a later poll."""
        await self.start()
        if self._failure is not None:
            raise self._failure
        messages: list[Message] = []
        waiting: list[Message] = []  # their extends are unanswered: buffered again after this poll
        try:
            async with asyncio.timeout(timeout_s):
                while not messages:
                    self.leases.hand_over(await self._buffer.get(), now_ms(), messages, waiting, self._give_back)
            while len(messages) < max_messages and not self._buffer.empty():
                self.leases.hand_over(self._buffer.get_nowait(), now_ms(), messages, waiting, self._give_back)
        except TimeoutError:
            pass
        finally:
            for message in waiting:
                self._buffer.put_nowait(message)
        return messages

    def lease_counts(self) -> LeaseCounts:
        """What keeping this consumer's leases did so far: extends sent, leases renewed, messages dropped."""
        return self.leases.counts()

    async def __aiter__(self) -> AsyncIterator[Message]:
        while not self._closed:
            for message in await self.poll():
                yield message

    async def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every ack, nack and extend made so far has its answer."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.settlements.flush()
        except TimeoutError:
            raise RequestTimedOut(f"settlements not answered within {timeout_s} s") from None

    async def close(self, timeout_s: float | None = 10.0) -> None:
        """Send pending settlements, stop the streams (unsettled leases expire on the broker)."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.settlements.close(timeout_s)
        finally:
            tasks = [*self._streams.values(), *(task for task in (self._watcher, self._keeper) if task)]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.router.close()

    # ------------------------------------------------------------------ keeping leases

    async def _keep_leases(self) -> None:
        """Each round: renew what is due (one Extend per partition), then sleep until the next lease is due."""
        while True:
            wait_s = keep_leases_round(self.settlements, self.leases, now_ms)
            if wait_s is None:
                return  # closed
            await asyncio.sleep(wait_s)

    def _give_back(self, message: Message) -> None:
        """Nack, without a delay, a message this consumer will not hand out (its answer is not needed)."""
        try:
            self.settlements.nack(message, 0, ENDING_REASON)
        except Unavailable:
            pass  # closed: the lease runs out on its own

    def _released(self) -> None:
        if self._room is not None:
            self._room.set()

    async def _wait_for_room(self, topic: str, partition: int) -> None:
        """Before a partition's stream (re)opens: until this consumer holds fewer than `prefetch` of its leases."""
        while self.leases.held(topic, partition) >= self.prefetch:
            self._room.clear()
            await self._room.wait()

    # ------------------------------------------------------------------ lease streams

    async def _open_streams(self, fresh: bool = False) -> None:
        cluster = await (self.router.refresh() if fresh else self.router.cluster_map())
        for topic in self.topics:
            wanted = self.partitions if self.partitions is not None else sorted(cluster.topics.get(topic, {}))
            for partition in wanted:
                if (topic, partition) not in self._streams and not self._closed:
                    task = asyncio.get_running_loop().create_task(self._lease(topic, partition))
                    self._streams[(topic, partition)] = task

    async def _watch_partitions(self) -> None:
        while True:
            await asyncio.sleep(self.partitions_check_s)
            try:
                await self._open_streams(fresh=True)
            except RaftbusError:
                continue  # no broker answered: the next round asks again

    async def _lease(self, topic: str, partition: int) -> None:
        request = qpb.LeaseRequest(topic=topic, partition=partition, max_messages=self.lease_batch_messages,
                                   visibility_ms=self.visibility_ms, max_in_flight=self.prefetch, packed=True)
        failures = 0
        while True:
            await self._wait_for_room(topic, partition)
            try:
                conn = self.router.connection(await self.router.leader_address(topic, partition))
                async for answer in qpb_grpc.QueueStub(conn.channel).LeaseStream(request):
                    if answer.error.code:
                        raise response_error(answer)
                    failures = 0
                    messages = leased_messages(topic, partition, answer, self._settler)
                    self.leases.received(messages, now_ms())
                    for message in messages:
                        self._buffer.put_nowait(message)
                reason: RaftbusError = Unavailable("lease stream ended")
            except (grpc.RpcError, RaftbusError) as exc:
                reason = typed(exc)
            failures += 1
            if not reason.retriable:  # poll raises it
                self._failure = reason
                return
            if self.router.note_failure(reason, 1, topic=topic, partition=partition) == 0.0 and failures <= 2:
                continue  # a NOT_LEADER hint: reopen on the named leader at once
            await asyncio.sleep(min(settings.QUEUE_STREAM_RETRY_BACKOFF_MS * 2 ** (failures - 1),
                                    settings.QUEUE_STREAM_RETRY_BACKOFF_MAX_MS) / 1000)
