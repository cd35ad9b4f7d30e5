"""The Consumer: reads stream topics as a member of a consumer group, committing offsets as it goes.

    with Consumer("127.0.0.1:7070", group="billing", topics=["orders"], auto_offset_reset="earliest") as c:
        for record in c:
            handle(record)            # committed automatically every auto_commit_interval_ms and on close

Membership: the consumer joins the group on its first poll; a heartbeat thread keeps it alive and flags a new
generation at once. Rebalances run inside `poll` (on the caller's thread, like every listener callback), in
two phases: the consumer stops fetching the partitions it must give up, commits them (with auto-commit),
calls `on_partitions_revoked`, and only then releases them to their new owner; partitions it gains start
at the group's committed offset (else at `auto_offset_reset`) and are announced by `on_partitions_assigned`.
A member removed by the group (session expired) calls `on_partitions_lost` and joins again.

Delivery is at least once: a record returned by `poll` counts as processed by the next `poll` or `commit`.
See docs/groups.md for fencing, generations and lag.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from raftbus.client import settings
from raftbus.client.errors import (
    InvalidArgument,
    MetadataBehind,
    OffsetOutOfRange,
    PartitionNotAssigned,
    RaftbusError,
    Unavailable,
)
from raftbus.client.groups.fetcher import ConsumerRecords, Fetcher
from raftbus.client.groups.calls import GroupCalls, TopicPartition
from raftbus.client.groups.member import REJOIN, RESYNC, MemberOptions, Membership, PartitionHooks
from raftbus.client.credentials import TlsSource
from raftbus.client.router import Router
from raftbus.client.wire import raftbus_pb2 as pb

log = logging.getLogger(__name__)

EARLIEST, LATEST = "earliest", "latest"
_EARLIEST_MS, _LATEST_MS = -2, -1


def checked_topics(group: str, topics: str | Iterable[str], auto_offset_reset: str, max_poll_records: int,
                   fetch_bytes_max: int, buffer_bytes_max: int) -> list[str]:
    """A group consumer's topics, sorted, once its options are checked (InvalidArgument otherwise)."""
    topics = sorted({topics} if isinstance(topics, str) else set(topics))
    if not group or not topics:
        raise InvalidArgument("a consumer needs a group and at least one topic")
    if auto_offset_reset not in (EARLIEST, LATEST):
        raise InvalidArgument(f"auto_offset_reset must be 'earliest' or 'latest', not {auto_offset_reset!r}")
    if max_poll_records < 1 or fetch_bytes_max < 1 or buffer_bytes_max < fetch_bytes_max:
        raise InvalidArgument("need max_poll_records >= 1 and 0 < fetch_bytes_max <= buffer_bytes_max")
    return topics


class Consumer:
    """A consumer-group member for stream topics; see the module docstring. Not thread-safe (one user thread)."""

    def __init__(
        self,
        bootstrap: str | list[str] | None = None,
        *,
        group: str,
        topics: str | Iterable[str],
        auto_offset_reset: str = LATEST,
        enable_auto_commit: bool = settings.ENABLE_AUTO_COMMIT,
        auto_commit_interval_ms: int = settings.AUTO_COMMIT_INTERVAL_MS,
        session_timeout_ms: int = settings.SESSION_TIMEOUT_MS,
        rebalance_timeout_ms: int = settings.REBALANCE_TIMEOUT_MS,
        heartbeat_interval_ms: int = settings.HEARTBEAT_INTERVAL_MS,
        max_poll_records: int = settings.MAX_POLL_RECORDS,
        fetch_bytes_max: int = settings.CONSUMER_FETCH_BYTES_MAX,
        fetch_wait_ms: int = settings.FETCH_WAIT_MS,
        buffer_bytes_max: int = settings.CONSUMER_BUFFER_BYTES_MAX,
        request_timeout_ms: int = settings.REQUEST_TIMEOUT_MS,
        tls_ca: TlsSource = None, tls_cert: TlsSource = None, tls_key: TlsSource = None, token: str | None = None,
        poll_timeout_ms: int = settings.POLL_TIMEOUT_MS,
        client_id: str = "",
        listener=None,
        router: Router | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        topics = checked_topics(group, topics, auto_offset_reset, max_poll_records, fetch_bytes_max, buffer_bytes_max)
        self.group = group
        self.topics = topics
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.max_poll_records = max_poll_records
        self.poll_timeout_s = poll_timeout_ms / 1000
        self.router = router or Router(bootstrap, request_timeout_ms=request_timeout_ms,
                                       tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token)
        self.calls = GroupCalls(self.router)
        self._clock = clock
        self._wake = threading.Condition()
        self._fetcher = Fetcher(self.router, self._wake, fetch_bytes_max=fetch_bytes_max, fetch_wait_ms=fetch_wait_ms,
                                buffer_bytes_max=buffer_bytes_max, clock=clock)
        # Per-partition calls run in parallel on `_calls`; whole commits run one at a time, in order, on
        # `_commit_lane`, so a later commit never overtakes an earlier one (offsets never move back).
        self._calls = ThreadPoolExecutor(max_workers=settings.CONSUMER_CALL_THREADS,
                                         thread_name_prefix="raftbus-consumer-call")
        self._commit_lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raftbus-commit")
        self._committed: dict[TopicPartition, int] = {}
        self._rewound: set[TopicPartition] = set()
        self._commit_lock = threading.Lock()
        self._last_auto_commit_s = clock()
        self._closed = False
        options = MemberOptions(group, tuple(topics), client_id, session_timeout_ms, rebalance_timeout_ms,
                                heartbeat_interval_ms)
        hooks = PartitionHooks(positions=self._fetcher.positions, stop_reading=self._fetcher.remove,
                               start_reading=self._start_reading,
                               commit_revoked=self.commit if enable_auto_commit else None)
        self._membership = Membership(self.calls, options, hooks, self._wake, listener, clock)

    # ------------------------------------------------------------------ properties
    @property
    def member_id(self) -> str:
        return self._membership.member[0]

    @property
    def generation(self) -> int:
        """The generation of the member's current assignment (0 before the first)."""
        return self._membership.member[1]

    def assignment(self) -> set[TopicPartition]:
        """The partitions this member owns and reads now."""
        return set(self._membership.assigned)

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record `poll` returns for `tp`."""
        return self._fetcher.position(self._owned(tp))

    def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset for `tp` (None if never committed), read linearizably at its leader."""
        answer = self.calls.fetch_offset(self.group, TopicPartition(*tp), consistent=True)
        return None if answer.committed_offset < 0 else answer.committed_offset

    # ------------------------------------------------------------------ polling
    def poll(self, timeout_s: float = 1.0, max_records: int | None = None) -> ConsumerRecords:
        """Records of the owned partitions, waiting up to timeout_s for some; may run a rebalance first."""
        self._check_open()
        budget = max_records or self.max_poll_records
        deadline = self._clock() + max(timeout_s, 0.0)
        self._maybe_auto_commit()
        while True:
            self._membership.handle()
            self._handle_fetch_errors(self._fetcher.collect())
            records = self._fetcher.drain(budget)
            if records:
                return records
            member_id, generation = self._membership.member
            self._fetcher.send((self.group, member_id, generation))
            left_s = deadline - self._clock()
            if left_s <= 0:
                return records
            with self._wake:
                self._wake.wait_for(self._has_news, min(left_s, settings.POLL_IDLE_SLEEP_MS / 1000))

    def __iter__(self) -> Iterator:
        while not self._closed:
            yield from self.poll(self.poll_timeout_s)

    def _has_news(self) -> bool:
        return self._fetcher.has_arrivals() or self._membership.due() or self._closed

    # ------------------------------------------------------------------ committing
    def commit(self, offsets: dict | None = None) -> dict[TopicPartition, int]:
        """Commit `offsets` ({partition: next offset}), by default every owned partition's position; waits.

        Raises StaleGeneration / PartitionNotAssigned / UnknownMember when the partition moved on (the member
        then syncs or re-joins at its next poll) and other typed errors as they come.
        """
        return self._commit_lane.submit(self._commit_now, self._offsets_to_commit(offsets)).result()

    def commit_async(self, offsets: dict | None = None,
                     callback: Callable[[dict, BaseException | None], None] | None = None) -> Future:
        """Like commit, without waiting: the future resolves to the committed offsets; `callback(offsets, error)`."""
        wanted = self._offsets_to_commit(offsets)
        future = self._commit_lane.submit(self._commit_now, wanted)
        if callback is not None:
            future.add_done_callback(lambda f: callback(wanted, f.exception()))
        return future

    def _offsets_to_commit(self, offsets: dict | None) -> dict[TopicPartition, int]:
        self._check_open()
        if offsets is not None:
            return {TopicPartition(*tp): int(o) for tp, o in offsets.items()}
        positions = self._fetcher.positions()
        with self._commit_lock:
            return {tp: o for tp, o in positions.items() if self._committed.get(tp) != o or tp in self._rewound}

    def _commit_now(self, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        member_id, generation = self._membership.member
        with self._commit_lock:
            resets = {tp for tp in offsets if tp in self._rewound}
        futures = {tp: self._calls.submit(self._commit_one, member_id, generation, tp, o, tp in resets)
                   for tp, o in offsets.items()} if len(offsets) > 1 else {}
        first_error: RaftbusError | None = None
        for tp, offset in offsets.items():
            try:
                if tp in futures:
                    futures[tp].result()
                else:
                    self._commit_one(member_id, generation, tp, offset, tp in resets)
            except RaftbusError as err:
                self._membership.note_error(err, member_id)
                first_error = first_error or err
                continue
            with self._commit_lock:
                self._committed[tp] = offset
                self._rewound.discard(tp)
        if first_error is not None:
            raise first_error
        return offsets

    def _commit_one(self, member_id: str, generation: int, tp: TopicPartition, offset: int, reset: bool) -> int:
        deadline = self._clock() + self.router.request_timeout_s
        while True:
            try:
                return self.calls.commit(self.group, member_id, generation, tp, offset, reset=reset)
            except MetadataBehind:
                if self._clock() > deadline:
                    raise
                time.sleep(settings.RETRY_BACKOFF_MS / 1000)

    def _maybe_auto_commit(self) -> None:
        if not self.enable_auto_commit or not self._membership.assigned:
            return
        if self._clock() - self._last_auto_commit_s < self.auto_commit_interval_s:
            return
        self._last_auto_commit_s = self._clock()
        self.commit_async(callback=self._log_commit_failure)

    @staticmethod
    def _log_commit_failure(offsets: dict, error: BaseException | None) -> None:
        if error is not None:
            log.info("auto-commit of %d partitions failed: %s", len(offsets), error)

    # ------------------------------------------------------------------ positions
    def _start_reading(self, gained, member: tuple[str, int]) -> None:
        """Position newly owned partitions at the committed offset, else at auto_offset_reset."""
        futures = {tp: self._calls.submit(self._start_position, tp, member) for tp in gained}
        positions = {tp: future.result() for tp, future in futures.items()}  # all or none: a failure syncs again
        for tp, position in positions.items():
            self._fetcher.assign(tp, position)

    def _start_position(self, tp: TopicPartition, member: tuple[str, int]) -> int:
        """Where to start reading a gained partition; the read through the log, as its owner, also fences
        commits of earlier owners there (docs/groups.md)."""
        answer = self.calls.fetch_offset(self.group, tp, consistent=True, member=member)
        with self._commit_lock:
            self._rewound.discard(tp)
            if answer.committed_offset >= 0:
                self._committed[tp] = answer.committed_offset
                return answer.committed_offset
            self._committed.pop(tp, None)
        return answer.log_start_offset if self.auto_offset_reset == EARLIEST else answer.high_watermark

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read `tp` from `offset` on; the next commit of `tp` may move the committed offset backwards."""
        tp = self._owned(tp)
        if type(offset) is not int or offset < 0:
            raise InvalidArgument(f"offset must be an int >= 0, not {offset!r}")
        self._fetcher.seek(tp, offset)
        with self._commit_lock:
            self._rewound.add(tp)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(_EARLIEST_MS, partitions)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(_LATEST_MS, partitions)

    def seek_to_time(self, timestamp_ms: int, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Seek to the first offset whose batch has a timestamp >= timestamp_ms (the end when there is none)."""
        if timestamp_ms < 0:
            raise InvalidArgument("timestamp_ms must be >= 0")
        self._seek_to(timestamp_ms, partitions)

    def _seek_to(self, timestamp_ms: int, partitions) -> None:
        owned = self._membership.assigned if partitions is None else [self._owned(tp) for tp in partitions]
        for tp in owned:
            self.seek(tp, self._list_offset(tp, timestamp_ms).offset)

    def _list_offset(self, tp: TopicPartition, timestamp_ms: int) -> pb.ListOffsetsResponse:
        request = pb.ListOffsetsRequest(topic=tp.topic, partition=tp.partition, timestamp_ms=timestamp_ms)
        return self.router.call_partition(
            tp.topic, tp.partition, lambda conn: conn.log.ListOffsets(request, timeout=self.router.request_timeout_s))

    def _owned(self, tp) -> TopicPartition:
        tp = TopicPartition(*tp)
        if tp not in self._membership.assigned:
            raise PartitionNotAssigned(f"{tp.topic}/{tp.partition} is not assigned to this consumer")
        return tp

    # ------------------------------------------------------------------ fetch errors
    def _handle_fetch_errors(self, failures) -> None:
        for tp, err in failures:
            if isinstance(err, (RESYNC + REJOIN)):
                self._membership.note_error(err, self._membership.member[0])
                self._fetcher.retry_later(tp, settings.RETRY_BACKOFF_MS / 1000)
            elif isinstance(err, OffsetOutOfRange):
                self._reset_out_of_range(tp, err)
            elif isinstance(err, MetadataBehind):
                self._fetcher.retry_later(tp, settings.RETRY_BACKOFF_MS / 1000)
            else:
                delay_s = self.router.note_failure(err, self._fetcher.failures(tp), topic=tp.topic,
                                                   partition=tp.partition)
                if delay_s is None:
                    raise err
                self._fetcher.retry_later(tp, delay_s)

    def _reset_out_of_range(self, tp: TopicPartition, err: OffsetOutOfRange) -> None:
        """Below the log start: apply auto_offset_reset. Above the high watermark: a new leader catching up."""
        offsets = self._list_offset(tp, _EARLIEST_MS)
        position = self._fetcher.position(tp)
        if position < offsets.log_start_offset:
            restart = offsets.log_start_offset if self.auto_offset_reset == EARLIEST else offsets.high_watermark
            log.warning("%s/%d: offset %d was removed by retention; restarting at %d", tp.topic, tp.partition,
                        position, restart)
            self._fetcher.seek(tp, restart)
        elif self._fetcher.failures(tp) * settings.POLL_IDLE_SLEEP_MS > settings.HIGH_WATERMARK_CATCH_UP_MS:
            raise err
        else:
            self._fetcher.retry_later(tp, settings.POLL_IDLE_SLEEP_MS / 1000)

    # ------------------------------------------------------------------ lifecycle
    def _check_open(self) -> None:
        if self._closed:
            raise Unavailable("consumer is closed")

    def close(self) -> None:
        """Commit (with auto-commit), tell the listener the partitions are revoked, leave the group, stop."""
        if self._closed:
            return
        try:
            if self.enable_auto_commit and self._membership.assigned and not self._membership.need_rejoin:
                try:
                    self.commit()
                except RaftbusError as err:
                    log.info("final commit failed: %s", err)
            self._membership.leave()
        finally:
            self._closed = True
            self._membership.stop(self.router.request_timeout_s)
            self._fetcher.close()
            self._commit_lane.shutdown(wait=True)
            self._calls.shutdown(wait=True)
            self.router.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
