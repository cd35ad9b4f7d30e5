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
    StaleGeneration,
    Unavailable,
    UnknownGroup,
    UnknownMember,
    UnknownPartition,
    UnknownTopic,
)
from raftbus.client.fetcher import ConsumerRecords, Fetcher
from raftbus.client.group_calls import Assignment, GroupCalls, TopicPartition
from raftbus.client.heartbeat import Heartbeat
from raftbus.client.router import Router
from raftbus.client.wire import raftbus_pb2 as pb

log = logging.getLogger(__name__)

EARLIEST, LATEST = "earliest", "latest"
_EARLIEST_MS, _LATEST_MS = -2, -1
# Errors that mean the member's view of its assignment is out of date: sync again (a deleted topic's
# partitions leave the assignment with the next generation).
_RESYNC = (StaleGeneration, PartitionNotAssigned, UnknownTopic, UnknownPartition)
_REJOIN = (UnknownMember, UnknownGroup)


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
        poll_timeout_ms: int = settings.POLL_TIMEOUT_MS,
        client_id: str = "",
        listener=None,
        router: Router | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.topics = sorted({topics} if isinstance(topics, str) else set(topics))
        if not group or not self.topics:
            raise InvalidArgument("a Consumer needs a group and at least one topic")
        if auto_offset_reset not in (EARLIEST, LATEST):
            raise InvalidArgument(f"auto_offset_reset must be 'earliest' or 'latest', not {auto_offset_reset!r}")
        if max_poll_records < 1 or fetch_bytes_max < 1 or buffer_bytes_max < fetch_bytes_max:
            raise InvalidArgument("need max_poll_records >= 1 and 0 < fetch_bytes_max <= buffer_bytes_max")
        self.group = group
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_records = max_poll_records
        self.poll_timeout_s = poll_timeout_ms / 1000
        self.client_id = client_id
        self.listener = listener
        self.router = router or Router(bootstrap, request_timeout_ms=request_timeout_ms)
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
        self._member: tuple[str, int] = ("", 0)  # (member_id, generation): replaced whole, read by the heartbeat
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._need_sync = False
        self._need_rejoin = True
        self._membership_retry_at_s = 0.0
        self._committed: dict[TopicPartition, int] = {}
        self._rewound: set[TopicPartition] = set()
        self._commit_lock = threading.Lock()
        self._last_auto_commit_s = clock()
        self._heartbeat: Heartbeat | None = None
        self._closed = False

    # ------------------------------------------------------------------ properties
    @property
    def member_id(self) -> str:
        return self._member[0]

    @property
    def generation(self) -> int:
        """The generation of the member's current assignment (0 before the first)."""
        return self._member[1]

    def assignment(self) -> set[TopicPartition]:
        """The partitions this member owns and reads now."""
        return set(self._assigned)

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record `poll` returns for `tp`."""
        return self._fetcher.position(self._owned(tp))

    def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset for `tp` (None if never committed), read through the partition's log."""
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
            self._handle_membership()
            self._handle_fetch_errors(self._fetcher.collect())
            records = self._fetcher.drain(budget)
            if records:
                return records
            self._fetcher.send(self._fetch_member())
            left_s = deadline - self._clock()
            if left_s <= 0:
                return records
            with self._wake:
                self._wake.wait_for(self._has_news, min(left_s, settings.POLL_IDLE_SLEEP_MS / 1000))

    def __iter__(self) -> Iterator:
        while not self._closed:
            yield from self.poll(self.poll_timeout_s)

    def _has_news(self) -> bool:
        membership_due = (self._need_sync or self._need_rejoin) and self._clock() >= self._membership_retry_at_s
        return self._fetcher.has_arrivals() or membership_due or self._closed

    def _fetch_member(self) -> tuple[str, str, int]:
        member_id, generation = self._member
        return self.group, member_id, generation

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
        member_id, generation = self._member
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
                self._note_membership_error(err, member_id)
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
        if not self.enable_auto_commit or not self._assigned:
            return
        if self._clock() - self._last_auto_commit_s < self.auto_commit_interval_s:
            return
        self._last_auto_commit_s = self._clock()
        self.commit_async(callback=self._log_commit_failure)

    @staticmethod
    def _log_commit_failure(offsets: dict, error: BaseException | None) -> None:
        if error is not None:
            log.info("auto-commit of %d partitions failed: %s", len(offsets), error)

    # ------------------------------------------------------------------ seeking
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
        for tp in (self._assigned if partitions is None else [self._owned(tp) for tp in partitions]):
            self.seek(tp, self._list_offset(tp, timestamp_ms).offset)

    def _list_offset(self, tp: TopicPartition, timestamp_ms: int) -> pb.ListOffsetsResponse:
        request = pb.ListOffsetsRequest(topic=tp.topic, partition=tp.partition, timestamp_ms=timestamp_ms)
        return self.router.call_partition(
            tp.topic, tp.partition, lambda conn: conn.log.ListOffsets(request, timeout=self.router.request_timeout_s))

    def _owned(self, tp) -> TopicPartition:
        tp = TopicPartition(*tp)
        if tp not in self._assigned:
            raise PartitionNotAssigned(f"{tp.topic}/{tp.partition} is not assigned to this consumer")
        return tp

    # ------------------------------------------------------------------ membership (the caller's thread)
    def _handle_membership(self) -> None:
        """Join or sync when flagged; a retriable failure is retried at a later poll, fetching goes on."""
        if not (self._need_rejoin or self._need_sync) or self._clock() < self._membership_retry_at_s:
            return
        try:
            if self._need_rejoin:
                self._lose_everything()
                self._join()
            if self._need_sync:
                self._sync()
        except _REJOIN:
            self._flag_rejoin()
        except RaftbusError as err:
            if not err.retriable:
                raise
            log.info("group %s: membership call failed, retrying: %s", self.group, err)
            self._membership_retry_at_s = self._clock() + settings.RETRY_BACKOFF_MAX_MS / 1000

    def _join(self) -> None:
        answer = self.calls.join(self.group, "", self.client_id, self.topics, self.session_timeout_ms,
                                 self.rebalance_timeout_ms)
        with self._wake:
            self._member = (answer.member_id, 0)
            self._need_rejoin = False
            self._need_sync = True
            self._wake.notify_all()
        if self._heartbeat is None:
            interval_ms = min(self.heartbeat_interval_ms, answer.heartbeat_interval_ms)
            self._heartbeat = Heartbeat(self.calls, self.group, lambda: self._member, self._wake,
                                        interval_ms=interval_ms, on_rebalance=self._flag_sync,
                                        on_unknown=self._flag_rejoin, clock=self._clock)
            self._heartbeat.start()
        log.info("joined group %s as %s", self.group, answer.member_id)

    def _sync(self) -> None:
        """Bring the owned partitions in line with the group: give up revoked ones (committed), start new ones."""
        member_id, generation = self._member
        with self._wake:
            self._need_sync = False  # a heartbeat flagging a newer generation meanwhile sets it again
        try:
            self._sync_to(member_id, self.calls.sync(self.group, member_id, generation))
        except BaseException:
            self._flag_sync()
            raise

    def _sync_to(self, member_id: str, view: Assignment) -> None:
        self._drop_lost(view.owned)
        if view.revoking:
            view = self._give_up(view)
        gained = view.owned - self._assigned
        self._start(gained)
        with self._wake:
            self._assigned = view.owned
            self._member = (member_id, view.generation)
            self._need_sync = self._need_sync or bool(view.revoking)
            self._wake.notify_all()
        if gained:
            self._call_listener("on_partitions_assigned", set(gained))

    def _give_up(self, view: Assignment) -> Assignment:
        """Commit the revoked partitions (auto-commit), tell the listener, stop reading them, then release them.

        Nothing is fetched or handed out meanwhile (this runs inside poll), so the listener can still commit
        the revoked partitions' positions itself.
        """
        revoked = view.revoking & self._assigned
        if self.enable_auto_commit and revoked:
            positions = self._fetcher.positions()
            try:
                self.commit({tp: positions[tp] for tp in revoked})
            except RaftbusError as err:
                log.info("commit of revoked partitions failed: %s", err)
        if revoked:
            self._call_listener("on_partitions_revoked", set(revoked))
        self._fetcher.remove(revoked)
        self._assigned = self._assigned - revoked
        return self.calls.sync(self.group, self._member[0], view.generation, released=view.revoking)

    def _drop_lost(self, owned: frozenset[TopicPartition]) -> None:
        lost = self._assigned - owned
        if lost:
            self._fetcher.remove(lost)
            self._assigned = self._assigned - lost
            self._call_listener("on_partitions_lost", set(lost))

    def _lose_everything(self) -> None:
        if self._assigned:
            self._drop_lost(frozenset())
        with self._wake:
            self._member = ("", 0)

    def _start(self, gained) -> None:
        """Position newly owned partitions at the committed offset, else at auto_offset_reset."""
        futures = {tp: self._calls.submit(self._start_position, tp) for tp in gained}
        for tp, future in futures.items():
            self._fetcher.assign(tp, future.result())

    def _start_position(self, tp: TopicPartition) -> int:
        answer = self.calls.fetch_offset(self.group, tp, consistent=True)
        with self._commit_lock:
            self._rewound.discard(tp)
            if answer.committed_offset >= 0:
                self._committed[tp] = answer.committed_offset
                return answer.committed_offset
            self._committed.pop(tp, None)
        return answer.log_start_offset if self.auto_offset_reset == EARLIEST else answer.high_watermark

    def _flag_sync(self) -> None:
        with self._wake:
            self._need_sync = True
            self._wake.notify_all()

    def _flag_rejoin(self, member_id: str | None = None) -> None:
        """Join again, unless the news is about an earlier membership (`member_id` given and not current)."""
        with self._wake:
            if member_id is not None and member_id != self._member[0]:
                return
            self._need_rejoin = True
            self._wake.notify_all()

    def _note_membership_error(self, err: RaftbusError, member_id: str) -> None:
        if isinstance(err, _REJOIN):
            self._flag_rejoin(member_id)
        elif isinstance(err, _RESYNC) and member_id == self._member[0]:
            self._flag_sync()

    def _call_listener(self, name: str, partitions: set[TopicPartition]) -> None:
        """Call the listener; a failing callback is logged so the rebalance it is part of still completes."""
        method = getattr(self.listener, name, None)
        if method is None and name == "on_partitions_lost":
            method = getattr(self.listener, "on_partitions_revoked", None)
        if method is None:
            return
        try:
            method(partitions)
        except Exception:
            log.exception("rebalance listener %s failed", name)

    # ------------------------------------------------------------------ fetch errors
    def _handle_fetch_errors(self, failures) -> None:
        for tp, err in failures:
            if isinstance(err, (_RESYNC + _REJOIN)):
                self._note_membership_error(err, self._member[0])
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
            member_id, _ = self._member
            if member_id and not self._need_rejoin:
                self._leave(member_id)
        finally:
            self._closed = True
            if self._heartbeat is not None:
                self._heartbeat.stop(self.router.request_timeout_s)
            self._fetcher.close()
            self._commit_lane.shutdown(wait=True)
            self._calls.shutdown(wait=True)
            self.router.close()

    def _leave(self, member_id: str) -> None:
        if self.enable_auto_commit and self._assigned:
            try:
                self.commit()
            except RaftbusError as err:
                log.info("final commit failed: %s", err)
        if self._assigned:
            self._call_listener("on_partitions_revoked", set(self._assigned))
        self._fetcher.close()
        self._assigned = frozenset()
        try:
            self.calls.leave(self.group, member_id)
        except RaftbusError as err:
            log.info("leaving group %s failed: %s", self.group, err)

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
