"""AsyncConsumer: a consumer-group member for stream topics, from asyncio code.

    async with AsyncConsumer("127.0.0.1:7070", group="billing", topics=["orders"],
                             auto_offset_reset="earliest") as consumer:
        async for record in consumer:
            handle(record)        # committed every auto_commit_interval_ms and on close

The sync Consumer's protocol (client/consumer.py, docs/groups.md): the member joins on its first poll, a
heartbeat task keeps it alive and flags a new generation at once; rebalances run inside `poll` in two phases
(commit and stop the partitions given up, then release them); gained partitions start at the committed offset,
else at `auto_offset_reset`. Fetches and commits carry the member id and generation, so a stale member is
fenced by the broker (StaleGeneration, PartitionNotAssigned, UnknownMember). Delivery is at least once.
Listener callbacks (`on_partitions_assigned`, `on_partitions_revoked`, `on_partitions_lost`) are plain
functions, called on the event loop.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterable

from raftbus.client import settings
from raftbus.client.credentials import TlsSource
from raftbus.client.consumer import Consumer, checked_topics
from raftbus.client.errors import InvalidArgument, MetadataBehind, OffsetOutOfRange, RaftbusError, Unavailable
from raftbus.client.reader import EARLIEST, EARLIEST_TIMESTAMP_MS, LATEST, LATEST_TIMESTAMP_MS
from raftbus.client.wire import raftbus_pb2 as pb

from raftbus.client.aio.fetcher import AsyncFetcher
from raftbus.client.aio.group_calls import AsyncGroupCalls
from raftbus.client.aio.lifecycle import AsyncClient
from raftbus.client.aio.group_member import AsyncMembership, LoopWake
from raftbus.client.aio.router import AsyncRouter
from raftbus.client.aio.shared import REJOIN, RESYNC, ConsumerRecords, MemberOptions, PartitionHooks, TopicPartition

log = logging.getLogger(__name__)


class AsyncConsumer(AsyncClient):
    """A consumer-group member for stream topics; see the module docstring. One task uses it at a time."""

    def __init__(self, bootstrap: str | list[str] | None = None, *, group: str, topics: str | Iterable[str],
                 auto_offset_reset: str = LATEST, enable_auto_commit: bool = settings.ENABLE_AUTO_COMMIT,
                 auto_commit_interval_ms: int = settings.AUTO_COMMIT_INTERVAL_MS,
                 session_timeout_ms: int = settings.SESSION_TIMEOUT_MS,
                 rebalance_timeout_ms: int = settings.REBALANCE_TIMEOUT_MS,
                 heartbeat_interval_ms: int = settings.HEARTBEAT_INTERVAL_MS,
                 max_poll_records: int = settings.MAX_POLL_RECORDS,
                 fetch_bytes_max: int = settings.CONSUMER_FETCH_BYTES_MAX, fetch_wait_ms: int = settings.FETCH_WAIT_MS,
                 buffer_bytes_max: int = settings.CONSUMER_BUFFER_BYTES_MAX,
                 request_timeout_ms: int = settings.REQUEST_TIMEOUT_MS,
                 poll_timeout_ms: int = settings.POLL_TIMEOUT_MS, client_id: str = "", listener=None,
                 tls_ca: TlsSource = None, tls_cert: TlsSource = None, tls_key: TlsSource = None,
                 token: str | None = None):
        topics = checked_topics(group, topics, auto_offset_reset, max_poll_records, fetch_bytes_max, buffer_bytes_max)
        self.group, self.topics = group, topics
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.max_poll_records = max_poll_records
        self.poll_timeout_s = poll_timeout_ms / 1000
        self.router = AsyncRouter(bootstrap, request_timeout_ms=request_timeout_ms,
                                  tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token)
        self.calls = AsyncGroupCalls(self.router)
        self._wake = LoopWake()
        self._fetcher = AsyncFetcher(self.router, self._wake, fetch_bytes_max=fetch_bytes_max,
                                     fetch_wait_ms=fetch_wait_ms, buffer_bytes_max=buffer_bytes_max)
        self._committed: dict[TopicPartition, int] = {}
        self._rewound: set[TopicPartition] = set()
        self._commit_order: asyncio.Lock | None = None  # commits one at a time: offsets never move back
        self._auto_commits: set[asyncio.Task] = set()
        self._last_auto_commit_s = time.monotonic()
        self._closed = False
        self._membership = AsyncMembership(
            self.calls,
            MemberOptions(group=group, topics=tuple(topics), client_id=client_id, session_timeout_ms=session_timeout_ms,
                          rebalance_timeout_ms=rebalance_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms),
            PartitionHooks(self._fetcher.positions, self._fetcher.remove, self._start_reading,
                           self.commit if enable_auto_commit else None),
            self._wake, listener, time.monotonic)

    # ------------------------------------------------------------------ state
    # The sync Consumer's views of the member, read from the same membership and fetcher state.
    member_id = Consumer.member_id
    generation = Consumer.generation
    assignment = Consumer.assignment
    position = Consumer.position
    _owned = Consumer._owned

    async def committed(self, tp) -> int | None:
        """The group's committed offset for `tp` (None if never committed), read linearizably at its leader."""
        answer = await self.calls.fetch_offset(self.group, TopicPartition(*tp))
        return None if answer.committed_offset < 0 else answer.committed_offset

    # ------------------------------------------------------------------ polling
    async def poll(self, timeout_s: float = 1.0, max_records: int | None = None) -> ConsumerRecords:
        """Records of the owned partitions, waiting up to timeout_s for some; may run a rebalance first."""
        self._check_open()
        deadline_s = time.monotonic() + max(timeout_s, 0.0)
        self._maybe_auto_commit()
        while True:
            await self._membership.handle()
            await self._handle_fetch_errors(self._fetcher.collect())
            records = self._fetcher.drain(max_records or self.max_poll_records)
            left_s = deadline_s - time.monotonic()
            if records or left_s <= 0:
                return records
            self._fetcher.send((self.group, *self._membership.member))
            await self._wake.wait_for_news(self._has_news, min(left_s, settings.POLL_IDLE_SLEEP_MS / 1000))

    async def __aiter__(self) -> AsyncIterator:
        while not self._closed:
            for record in await self.poll(self.poll_timeout_s):
                yield record

    def _has_news(self) -> bool:
        return self._fetcher.has_arrivals() or self._membership.due() or self._closed

    # ------------------------------------------------------------------ committing
    async def commit(self, offsets: dict | None = None) -> dict[TopicPartition, int]:
        """Commit `offsets` ({partition: next offset}), by default every owned partition's position.

        Raises StaleGeneration / PartitionNotAssigned / UnknownMember when the partition moved on (the member
        then syncs or re-joins at its next poll) and other typed errors as they come.
        """
        self._check_open()
        if offsets is None:
            wanted = {tp: o for tp, o in self._fetcher.positions().items()
                      if self._committed.get(tp) != o or tp in self._rewound}
        else:
            wanted = {TopicPartition(*tp): int(o) for tp, o in offsets.items()}
        if self._commit_order is None:
            self._commit_order = asyncio.Lock()
        async with self._commit_order:
            member_id, generation = self._membership.member
            outcomes = await asyncio.gather(*(self._commit_one(member_id, generation, tp, o)
                                              for tp, o in wanted.items()), return_exceptions=True)
        failures = [err for err in outcomes if isinstance(err, BaseException)]
        for err in failures:
            if isinstance(err, RaftbusError):
                self._membership.note_error(err, member_id)
        if failures:
            raise failures[0]
        return wanted

    async def _commit_one(self, member_id: str, generation: int, tp: TopicPartition, offset: int) -> None:
        deadline_s = time.monotonic() + self.router.request_timeout_s
        behind = True
        while behind:
            try:
                await self.calls.commit(self.group, member_id, generation, tp, offset, reset=tp in self._rewound)
                behind = False
            except MetadataBehind:  # this broker's group metadata is behind the member's generation
                if time.monotonic() > deadline_s:
                    raise
                await asyncio.sleep(settings.RETRY_BACKOFF_MS / 1000)
        self._committed[tp] = offset
        self._rewound.discard(tp)

    def _maybe_auto_commit(self) -> None:
        now_s = time.monotonic()
        due = self.enable_auto_commit and now_s - self._last_auto_commit_s >= self.auto_commit_interval_s
        if not due or not self._membership.assigned:
            return
        self._last_auto_commit_s = now_s
        task = asyncio.get_running_loop().create_task(self._commit_quietly("auto-commit"))
        self._auto_commits.add(task)
        task.add_done_callback(self._auto_commits.discard)

    async def _commit_quietly(self, what: str) -> None:
        """Commit every owned partition's position; a failure is logged (the next commit covers it)."""
        try:
            await self.commit()
        except RaftbusError as err:
            log.info("%s failed: %s", what, err)

    # ------------------------------------------------------------------ positions
    async def _start_reading(self, gained, member: tuple[str, int]) -> None:
        """Position newly owned partitions at the committed offset, else at auto_offset_reset; the reads, as the
        new owner, fence commits of earlier owners (docs/groups.md)."""
        gained = list(gained)
        answers = await asyncio.gather(*(self.calls.fetch_offset(self.group, tp, member) for tp in gained))
        for tp, answer in zip(gained, answers):
            self._rewound.discard(tp)
            if answer.committed_offset >= 0:
                self._committed[tp] = position = answer.committed_offset
            else:
                self._committed.pop(tp, None)
                position = answer.log_start_offset if self.auto_offset_reset == EARLIEST else answer.high_watermark
            self._fetcher.assign(tp, position)

    def seek(self, tp, offset: int) -> None:
        """Read `tp` from `offset` on; the next commit of `tp` may move the committed offset backwards."""
        if type(offset) is not int or offset < 0:
            raise InvalidArgument(f"offset must be an int >= 0, not {offset!r}")
        owned = self._owned(tp)
        self._fetcher.seek(owned, offset)
        self._rewound.add(owned)

    async def seek_to_beginning(self, partitions: Iterable | None = None) -> None:
        await self._seek_to(EARLIEST_TIMESTAMP_MS, partitions)

    async def seek_to_end(self, partitions: Iterable | None = None) -> None:
        await self._seek_to(LATEST_TIMESTAMP_MS, partitions)

    async def seek_to_time(self, timestamp_ms: int, partitions: Iterable | None = None) -> None:
        """Seek to the first offset whose batch has a timestamp >= timestamp_ms (the end when there is none)."""
        if timestamp_ms < 0:
            raise InvalidArgument("timestamp_ms must be >= 0")
        await self._seek_to(timestamp_ms, partitions)

    async def _seek_to(self, timestamp_ms: int, partitions: Iterable | None) -> None:
        chosen = self.assignment() if partitions is None else {self._owned(tp) for tp in partitions}
        for tp in chosen:
            self.seek(tp, (await self._list_offsets(tp, timestamp_ms)).offset)

    async def _list_offsets(self, tp: TopicPartition, timestamp_ms: int) -> pb.ListOffsetsResponse:
        ask = pb.ListOffsetsRequest(topic=tp.topic, partition=tp.partition, timestamp_ms=timestamp_ms)
        return await self.router.call_partition(
            tp.topic, tp.partition, lambda conn: conn.log.ListOffsets(ask, timeout=self.router.request_timeout_s))

    # ------------------------------------------------------------------ fetch errors
    async def _handle_fetch_errors(self, failures) -> None:
        for tp, err in failures:
            self._fetcher.retry_later(tp, await self._fetch_retry_delay_s(tp, err))

    async def _fetch_retry_delay_s(self, tp: TopicPartition, err: RaftbusError) -> float:
        """How long `tp` waits before its next fetch after `err`; raises the errors the caller must see."""
        if isinstance(err, OffsetOutOfRange):
            return await self._out_of_range_delay_s(tp, err)
        if isinstance(err, RESYNC + REJOIN):  # the member syncs or joins again at once
            self._membership.note_error(err, self.member_id)
        if isinstance(err, RESYNC + REJOIN + (MetadataBehind,)):
            return settings.RETRY_BACKOFF_MS / 1000
        delay_s = self.router.note_failure(err, self._fetcher.failures(tp), topic=tp.topic, partition=tp.partition)
        if delay_s is None:
            raise err
        return delay_s

    async def _out_of_range_delay_s(self, tp: TopicPartition, err: OffsetOutOfRange) -> float:
        """Below the log start: apply auto_offset_reset. Above the high watermark: a new leader catching up."""
        offsets = await self._list_offsets(tp, EARLIEST_TIMESTAMP_MS)
        if self._fetcher.position(tp) < offsets.log_start_offset:
            restart = offsets.log_start_offset if self.auto_offset_reset == EARLIEST else offsets.high_watermark
            self._fetcher.seek(tp, restart)
            return 0.0
        if self._fetcher.failures(tp) * settings.POLL_IDLE_SLEEP_MS > settings.HIGH_WATERMARK_CATCH_UP_MS:
            raise err
        return settings.POLL_IDLE_SLEEP_MS / 1000

    # ------------------------------------------------------------------ lifecycle
    def _check_open(self) -> None:
        if self._closed:
            raise Unavailable("consumer is closed")

    async def close(self) -> None:
        """Commit (with auto-commit), tell the listener the partitions are revoked, leave the group, stop."""
        if self._closed:
            return
        member = self._membership
        try:
            if self.enable_auto_commit and member.assigned and not member.need_rejoin:
                await self._commit_quietly("final commit")
            await member.leave()
        finally:
            self._closed = True
            await self._membership.stop()
            await asyncio.gather(*self._auto_commits, return_exceptions=True)
            await self._fetcher.aclose()
            await self.router.close()
