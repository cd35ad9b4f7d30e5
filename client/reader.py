"""The Reader: reads stream-topic partitions by offset, without a consumer group.

Every read goes to the partition's leader through the router. Positions are "earliest" (the log start),
"latest" (the high watermark) or an offset. Iterators keep the order of records within a partition; with
`stop_at_end` they end at the high watermark seen when they started, so records produced later are not read.

Falling behind retention: when a read that started at "earliest" (or `from_beginning`) gets OffsetOutOfRange
because retention removed records below its position, it restarts at the new log start and goes on; the
removed records are skipped. A read that started at an explicit offset raises OffsetOutOfRange instead.
A position above the high watermark (a new leader still applying committed entries) is retried for up to
`high_watermark_catch_up_ms` before OffsetOutOfRange is raised.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import grpc

from raftbus.client import settings
from raftbus.client.errors import InvalidArgument, OffsetOutOfRange, RaftbusError, error_from_proto, error_from_rpc
from raftbus.client.records import Record, decode_fetched, iter_stored_batches
from raftbus.client.credentials import TlsSource
from raftbus.client.router import Router
from raftbus.client.wire import raftbus_pb2 as pb

EARLIEST = "earliest"
LATEST = "latest"
# ListOffsets' special timestamps.
EARLIEST_TIMESTAMP_MS = -2
LATEST_TIMESTAMP_MS = -1

Position = str | int


@dataclass(frozen=True, slots=True)
class FetchResult:
    """The records of one fetch at or above the requested offset, and where to fetch next."""

    records: list[Record]
    next_offset: int
    high_watermark: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class PartitionRefusal:
    """A partition a FetchMany did not serve: the error, and the partition's offsets where the broker gave them
    (an offset out of range; -1 otherwise)."""

    error: RaftbusError
    log_start_offset: int = -1
    high_watermark: int = -1


def end_offset(batches: bytes, offset: int) -> int:
    """The offset after the last stored batch of a fetch answer (`offset` when the answer is empty)."""
    end = offset
    for batch in iter_stored_batches(batches):
        end = max(end, batch.base_offset + batch.record_count)
    return end


def fetch_result(topic: str, partition: int, offset: int, response: pb.FetchResponse) -> FetchResult:
    """Decode a FetchResponse, skipping records below `offset` (a batch may start before it)."""
    records = list(decode_fetched(topic, partition, response.batches, offset))
    return FetchResult(records, end_offset(response.batches, offset), response.high_watermark,
                       response.log_start_offset)


@dataclass(slots=True)
class Cursor:
    """A read position in one partition; `end_offset` is where a stop_at_end read stops (None: never).

    A cursor of iter_topic over several partitions starts unresolved: `offset` is EARLIEST_TIMESTAMP_MS or
    LATEST_TIMESTAMP_MS, which its first FetchMany resolves on the broker, and with `end_pending` its end is the
    high watermark of that first answer."""

    partition: int
    offset: int
    end_offset: int | None
    restart_at_log_start: bool
    end_pending: bool = False

    def done(self) -> bool:
        return not self.end_pending and self.end_offset is not None and self.offset >= self.end_offset

    def advance(self, result: FetchResult) -> list[Record]:
        """Move past `result` and return its records below `end_offset`."""
        if self.end_pending:
            self.end_offset, self.end_pending = result.high_watermark, False
        records = result.records
        if self.end_offset is None:
            self.offset = max(self.offset, result.next_offset)
            return records
        self.offset = max(self.offset, min(result.next_offset, self.end_offset))
        if records and records[-1].offset >= self.end_offset:
            records = [r for r in records if r.offset < self.end_offset]
        return records


def checked_partitions(topic: str, partitions: Iterable[int] | None, count: int) -> list[int]:
    """`partitions` of a topic of `count` partitions, as a list (all of them when None): InvalidArgument for a repeat
    or a number that is not a partition's."""
    if partitions is None:
        return list(range(count))
    numbers = list(partitions)
    if any(type(p) is not int or not 0 <= p < count for p in numbers) or len(set(numbers)) != len(numbers):
        raise InvalidArgument(f"partitions must be distinct partition numbers of {topic!r} (0 to {count - 1}), "
                              f"not {numbers!r}")
    return numbers


class Reader:
    """Reads partitions by offset; a context manager that closes its channels. See the module docstring."""

    def __init__(
        self,
        bootstrap: str | list[str] | None = None,
        *,
        fetch_bytes_max: int = settings.FETCH_BYTES_MAX,
        fetch_wait_ms: int = settings.FETCH_WAIT_MS,
        request_timeout_ms: int = settings.REQUEST_TIMEOUT_MS,
        tls_ca: TlsSource = None, tls_cert: TlsSource = None, tls_key: TlsSource = None, token: str | None = None,
        poll_idle_sleep_ms: int = settings.POLL_IDLE_SLEEP_MS,
        high_watermark_catch_up_ms: int = settings.HIGH_WATERMARK_CATCH_UP_MS,
        router: Router | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        if fetch_bytes_max <= 0 or fetch_wait_ms < 0:
            raise InvalidArgument("need fetch_bytes_max > 0 and fetch_wait_ms >= 0")
        self.router = router or Router(bootstrap, request_timeout_ms=request_timeout_ms,
                                       tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token)
        self.fetch_bytes_max = fetch_bytes_max
        self.fetch_wait_ms = fetch_wait_ms
        self.request_timeout_s = request_timeout_ms / 1000
        self.poll_idle_sleep_s = poll_idle_sleep_ms / 1000
        self.high_watermark_catch_up_s = high_watermark_catch_up_ms / 1000
        self._sleep = sleep
        self._clock = clock
        self._ahead: ThreadPoolExecutor | None = None  # see _pool

    # ------------------------------------------------------------------ single calls

    def partitions(self, topic: str) -> int:
        """How many partitions `topic` has; UnknownTopic if it does not exist."""
        return self.router.partitions_for(topic)

    def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """(log_start_offset, high_watermark) of the partition, from its leader."""
        response = self._list_offsets(topic, partition, EARLIEST_TIMESTAMP_MS)
        return response.log_start_offset, response.high_watermark

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first offset whose batch has a timestamp >= timestamp_ms (the high watermark if none)."""
        if timestamp_ms < 0:
            raise InvalidArgument("timestamp_ms must be >= 0")
        return self._list_offsets(topic, partition, timestamp_ms).offset

    def _list_offsets(self, topic: str, partition: int, timestamp_ms: int) -> pb.ListOffsetsResponse:
        request = pb.ListOffsetsRequest(topic=topic, partition=partition, timestamp_ms=timestamp_ms)
        return self.router.call_partition(
            topic, partition, lambda conn: conn.log.ListOffsets(request, timeout=self.request_timeout_s))

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int | None = None,
              max_wait_ms: int = 0) -> FetchResult:
        """One fetch from the leader: records at or above `offset`, long-polling up to max_wait_ms at the end."""
        request = pb.FetchRequest(topic=topic, partition=partition, offset=offset,
                                  max_bytes=max_bytes or self.fetch_bytes_max, max_wait_ms=max_wait_ms)
        timeout_s = self.request_timeout_s + max_wait_ms / 1000
        response = self.router.call_partition(
            topic, partition, lambda conn: conn.log.Fetch(request, timeout=timeout_s))
        return fetch_result(topic, partition, offset, response)

    # ------------------------------------------------------------------ iterators

    def cursor(self, topic: str, partition: int, offset: Position = EARLIEST, stop_at_end: bool = False) -> Cursor:
        """Resolve "earliest"/"latest"/an offset into a Cursor (one ListOffsets call)."""
        if offset not in (EARLIEST, LATEST) and (type(offset) is not int or offset < 0):
            raise InvalidArgument(f"offset must be 'earliest', 'latest' or an offset >= 0, not {offset!r}")
        log_start, high_watermark = self.offsets(topic, partition)
        start = log_start if offset == EARLIEST else high_watermark if offset == LATEST else offset
        return Cursor(partition, start, high_watermark if stop_at_end else None, offset == EARLIEST)

    def iter_partition(self, topic: str, partition: int, offset: Position = EARLIEST, stop_at_end: bool = False,
                       idle_timeout_ms: int | None = None) -> Iterator[Record]:
        """Records of one partition in offset order, by long-poll fetches.

        Ends at the high watermark seen at the start with `stop_at_end`, or after `idle_timeout_ms` without a
        record; otherwise it follows the partition forever. The fetch after a batch of records is sent before the
        first of them is handed over, so the broker's answer travels while the caller works; a fetch sent ahead
        that fails is sent again in the caller's thread, where its error is handled as any fetch's.
        """
        yield from self._follow(topic, self.cursor(topic, partition, offset, stop_at_end), idle_timeout_ms)

    def iter_topic(self, topic: str, from_beginning: bool = False, stop_at_end: bool = False,
                   idle_timeout_ms: int | None = None, partitions: Iterable[int] | None = None) -> Iterator[Record]:
        """Records of every partition (or of `partitions`); order within each partition is kept.

        Starts at the log start of each partition with `from_beginning`, else at its high watermark; with
        `stop_at_end` each partition ends at the high watermark of its first answer. Several partitions are read
        with one FetchMany call per partition leader at a time (fetch_many), all leaders' calls in flight at once:
        each long-polls until one of its partitions has records, and the next call to a leader leaves as soon as
        its answer is in, before its records are handed over, so it travels while the caller works. A leader's
        answer holds at most `fetch_bytes_max` per partition and READER_FETCHES_AHEAD_MAX × `fetch_bytes_max`
        shared by the calls in flight; the partitions it names rotate from one call to the next, so none waits
        behind the others. One partition is read as iter_partition reads it.
        """
        numbers = checked_partitions(topic, partitions, self.partitions(topic))
        if len(numbers) == 1:
            yield from self.iter_partition(topic, numbers[0], EARLIEST if from_beginning else LATEST, stop_at_end,
                                           idle_timeout_ms)
            return
        start = EARLIEST_TIMESTAMP_MS if from_beginning else LATEST_TIMESTAMP_MS
        cursors = [Cursor(p, start, None, from_beginning, end_pending=stop_at_end) for p in numbers]
        yield from self._follow_many(topic, cursors, IdleTimer(idle_timeout_ms, self._clock))

    def fetch_many(self, topic: str, positions: list[tuple[int, int]], max_wait_ms: int = 0,
                   max_bytes: int | None = None) -> dict[int, FetchResult | PartitionRefusal]:
        """One read of several partitions: a FetchMany call to each of their leaders, sent together. Each
        partition's FetchResult, or the PartitionRefusal that says why it was not served (a call that failed as a
        whole refuses all its partitions with its error). `positions` are (partition, offset), the offset as
        Fetch's or EARLIEST_TIMESTAMP_MS / LATEST_TIMESTAMP_MS; `max_bytes` caps each call's answer
        (fetch_bytes_max per partition by default)."""
        by_leader, answers = self._by_leader(topic, positions)
        calls = [self._pool().submit(self._fetch_many_at, address, topic, group, max_wait_ms,
                                     max_bytes or self.fetch_bytes_max * len(group))
                 for address, group in by_leader]
        for future in calls:
            answers.update(future.result())
        return answers

    def _by_leader(self, topic: str, positions: list[tuple[int, int]]):
        """`positions` grouped by their partitions' leader addresses (group_by_leader)."""
        leaders: dict[int, str | RaftbusError] = {}
        for partition, _ in positions:
            try:
                leaders[partition] = self.router.leader_address(topic, partition)
            except RaftbusError as err:
                leaders[partition] = err
        return group_by_leader(positions, leaders)

    def _fetch_many_at(self, address: str, topic: str, positions: list[tuple[int, int]], max_wait_ms: int,
                       max_bytes: int) -> dict[int, FetchResult | PartitionRefusal]:
        """One FetchMany call to `address`, a leader of every partition in `positions`."""
        request = fetch_many_request(topic, positions, max_wait_ms, max_bytes, self.fetch_bytes_max)
        timeout_s = self.request_timeout_s + max_wait_ms / 1000
        try:
            response = self.router.call_at(address, lambda conn: conn.log.FetchMany(request, timeout=timeout_s))
        except RaftbusError as err:
            return {p: PartitionRefusal(err) for p, _ in positions}
        return many_answers(topic, positions, response)

    def _follow_many(self, topic: str, cursors: list[Cursor], idle: "IdleTimer") -> Iterator[Record]:
        """Reads several cursors with FetchMany calls, one in flight per leader, until each is done or the idle
        timer expires (ManyRead decides; see iter_topic)."""
        plan = ManyRead(self, topic, cursors, idle, self._clock)
        in_flight: dict[Future, _ManyCall] = {}
        try:
            while not plan.finished():
                self._send_many(plan, in_flight)
                if not in_flight:
                    self._sleep(plan.sleep_s())
                    continue
                done, _ = wait(list(in_flight), timeout=idle.left_s(), return_when=FIRST_COMPLETED)
                handed: list[list[Record]] = []
                for future in done:
                    call = in_flight.pop(future)
                    handed += plan.answered(call, self._many_answers(topic, future, call))
                if handed:
                    self._send_many(plan, in_flight)  # the next calls leave before these records are handed over
                    for records in handed:
                        yield from records
        finally:
            for future in in_flight:
                future.cancel()

    def _send_many(self, plan: "ManyRead", in_flight: dict) -> None:
        """Send the calls of the cursors that are due (ManyRead.calls) on the pool."""
        due = plan.due()
        if not due:
            return
        by_leader, refused = self._by_leader(plan.topic, [(c.partition, c.offset) for c in due])
        for call in plan.calls(due, by_leader, refused):
            if call.refusal is not None:
                future: Future = Future()
                future.set_result(call.refusal)
            else:
                future = self._pool().submit(self._fetch_many_at, call.address, plan.topic, call.positions,
                                             call.wait_ms, call.max_bytes)
            in_flight[future] = call

    def _many_answers(self, topic: str, future: Future, call: "_ManyCall") -> dict:
        """The answers of a FetchMany sent on the pool. A call the pool cancelled (the Reader was closed while it
        waited in the queue) is made here instead, and a refusal of it is raised: a closed Reader ends the read
        with the error any call on it gets."""
        if not future.cancelled():
            return future.result()
        answers = self._fetch_many_at(call.address, topic, call.positions, call.wait_ms, call.max_bytes)
        for answer in answers.values():
            if isinstance(answer, PartitionRefusal):
                raise answer.error
        return answers

    def _follow_cursors(self, topic: str, cursors: list[Cursor], idle_timeout_ms: int | None) -> Iterator[Record]:
        """Records of `cursors` until each is done or the idle timer expires: one as iter_partition reads it,
        several as iter_topic does (Table's watches read their partitions from positions of their own)."""
        if len(cursors) == 1:
            return self._follow(topic, cursors[0], idle_timeout_ms)
        return self._follow_many(topic, cursors, IdleTimer(idle_timeout_ms, self._clock))

    def _follow(self, topic: str, cursor: Cursor, idle_timeout_ms: int | None) -> Iterator[Record]:
        """Reads one cursor until it is done or the idle timer expires (see iter_partition)."""
        idle = IdleTimer(idle_timeout_ms, self._clock)
        ahead: Future | None = None  # its next fetch, sent ahead at the cursor's offset
        try:
            while not cursor.done() and not idle.expired():
                result, ahead = self._fetched_ahead(ahead), None
                wait_ms = idle.wait_ms(self.fetch_wait_ms)
                if result is None:
                    result = self._fetch_at(topic, cursor, wait_ms)
                records = cursor.advance(result)
                if records:
                    idle.reset()
                    if not cursor.done():
                        ahead = self._fetch_ahead(topic, cursor, idle.wait_ms(self.fetch_wait_ms))
                    yield from records
                elif wait_ms == 0 and not idle.expired():
                    self._sleep(self.poll_idle_sleep_s)
        finally:
            if ahead is not None:
                ahead.cancel()

    def stream_partition(self, topic: str, partition: int, offset: Position = EARLIEST,
                         stop_at_end: bool = False) -> Iterator[Record]:
        """Like iter_partition, over one server-streaming FetchStream call (fewer round trips when tailing).

        The stream is reopened at the current position after a leader change or a dropped connection.
        """
        cursor = self.cursor(topic, partition, offset, stop_at_end)
        attempt = 0
        while not cursor.done():
            try:
                for result in self._stream_results(topic, cursor):
                    attempt = 0
                    yield from cursor.advance(result)
                    if cursor.done():
                        return
            except RaftbusError as err:
                attempt += 1
                delay_s = self._retry_delay_s(topic, cursor, err, attempt)
                if delay_s:
                    self._sleep(delay_s)

    # ------------------------------------------------------------------ helpers

    def _stream_results(self, topic: str, cursor: Cursor) -> Iterator[FetchResult]:
        request = pb.FetchRequest(topic=topic, partition=cursor.partition, offset=cursor.offset,
                                  max_bytes=self.fetch_bytes_max, max_wait_ms=self.fetch_wait_ms)
        conn = self.router.connection(self.router.leader_address(topic, cursor.partition))
        call = conn.log.FetchStream(request)
        try:
            for response in call:
                if response.HasField("error"):
                    raise error_from_proto(response.error)
                yield fetch_result(topic, cursor.partition, cursor.offset, response)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from None
        finally:
            call.cancel()

    def _pool(self) -> ThreadPoolExecutor:
        """The Reader's threads for fetches sent ahead and start positions asked for at once (made when first
        used)."""
        if self._ahead is None:
            self._ahead = ThreadPoolExecutor(settings.READER_FETCHES_AHEAD_MAX,
                                             thread_name_prefix="raftbus-reader-fetch")
        return self._ahead

    def _fetch_ahead(self, topic: str, cursor: Cursor, max_wait_ms: int) -> Future:
        """Send the fetch at the cursor's position on the Reader's pool; its answer is taken by _fetched_ahead."""
        return self._pool().submit(self.fetch, topic, cursor.partition, cursor.offset, None, max_wait_ms)

    @staticmethod
    def _fetched_ahead(ahead: Future | None) -> FetchResult | None:
        """The answer of a fetch sent ahead; None when there was none, it failed or the Reader was closed meanwhile
        (the caller fetches again, and gets that fetch's own answer or error)."""
        if ahead is None:
            return None
        try:
            return ahead.result()
        except (RaftbusError, CancelledError):
            return None

    def _fetch_at(self, topic: str, cursor: Cursor, max_wait_ms: int) -> FetchResult:
        attempt = 0
        while True:
            try:
                return self.fetch(topic, cursor.partition, cursor.offset, max_wait_ms=max_wait_ms)
            except OffsetOutOfRange as err:
                attempt += 1
                delay_s = self._out_of_range_delay_s(topic, cursor, err, attempt)
                if delay_s:
                    self._sleep(delay_s)

    def _retry_delay_s(self, topic: str, cursor: Cursor, err: RaftbusError, attempt: int) -> float:
        """The delay before reading again at the cursor after `err`; raises `err` when it must not be retried."""
        if isinstance(err, OffsetOutOfRange):
            return self._out_of_range_delay_s(topic, cursor, err, attempt)
        delay_s = self.router.note_failure(err, attempt, topic=topic, partition=cursor.partition)
        if delay_s is None:
            raise err
        return delay_s

    def _out_of_range_delay_s(self, topic: str, cursor: Cursor, err: OffsetOutOfRange, attempt: int) -> float:
        """Restart below the log start (earliest-style reads only) or wait a bounded time for the high watermark."""
        log_start, _ = self.offsets(topic, cursor.partition)
        if cursor.offset < log_start:
            if not cursor.restart_at_log_start:
                raise err
            cursor.offset = log_start
            return 0.0
        if attempt * self.poll_idle_sleep_s > self.high_watermark_catch_up_s:
            raise err
        return self.poll_idle_sleep_s

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.shutdown(wait=False, cancel_futures=True)
        self.router.close()

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(slots=True)
class _ManyCall:
    """A FetchMany of a ManyRead: its cursors and what it asks; or, with `refusal`, the answer of partitions whose
    leader could not be found, handed back without a call."""

    cursors: list[Cursor]
    address: str
    positions: list[tuple[int, int]]
    wait_ms: int
    max_bytes: int
    refusal: dict | None = None


class ManyRead:
    """What a read of several cursors with FetchMany calls decides, for Reader.iter_topic and AsyncReader.iter_topic
    (they make the calls): which cursors are due, a round's calls (one per leader, with its wait and its share of
    READER_FETCHES_AHEAD_MAX × fetch_bytes_max), and what an answer changes.

    The cursors due rotate by one per round, so a partition past a call's byte cap leads a later call. A refused
    partition is fetched again after the router's delay for its error (a leader change); from its log start when
    retention passed it (earliest-style reads); after poll_idle_sleep while a new leader's high watermark catches
    up, for at most high_watermark_catch_up; anything else is raised. A call answered at once without records is
    not made again before poll_idle_sleep."""

    def __init__(self, reader, topic: str, cursors: list[Cursor], idle: "IdleTimer", clock: Callable[[], float]):
        self.reader = reader  # fetch_bytes_max, fetch_wait_ms, poll_idle_sleep_s, high_watermark_catch_up_s, router
        self.topic = topic
        self.cursors = cursors
        self.idle = idle
        self._clock = clock
        self._busy: set[int] = set()  # partitions with a call in flight
        self._not_before: dict[int, float] = {}  # partition -> when it may be fetched again
        self._attempts: dict[int, int] = {}  # partition -> refusals in a row
        self._rotation = 0
        self._in_flight = 0

    def finished(self) -> bool:
        return self.idle.expired() or all(c.done() for c in self.cursors)

    def due(self) -> list[Cursor]:
        """The cursors to fetch now: not done, no call in flight, no refusal or empty answer to wait out."""
        now = self._clock()
        for partition in [p for p, t in self._not_before.items() if t <= now]:
            del self._not_before[partition]
        ready = [c for c in self.cursors
                 if not c.done() and c.partition not in self._busy and c.partition not in self._not_before]
        if not ready:
            return []
        shift = self._rotation % len(ready)
        self._rotation += 1
        return ready[shift:] + ready[:shift]

    def calls(self, due: list[Cursor], by_leader: list[tuple[str, list[tuple[int, int]]]],
              refused: dict[int, "PartitionRefusal"]) -> list[_ManyCall]:
        """The calls of a round over `due`, grouped as group_by_leader grouped them; the caller sends each."""
        by_partition = {c.partition: c for c in due}
        wait_ms = self.idle.wait_ms(self.reader.fetch_wait_ms)
        count = len(by_leader) + self._in_flight
        calls = []
        for address, positions in by_leader:
            group = [by_partition[p] for p, _ in positions]
            share = max(1, min(len(group), settings.READER_FETCHES_AHEAD_MAX // max(1, count)))
            calls.append(_ManyCall(group, address, positions, wait_ms, self.reader.fetch_bytes_max * share))
        calls += [_ManyCall([by_partition[p]], "", [], 0, 0, refusal={p: refusal}) for p, refusal in refused.items()]
        for call in calls:
            self._busy.update(c.partition for c in call.cursors)
        self._in_flight += len(calls)
        return calls

    def answered(self, call: _ManyCall, answers: dict) -> list[list[Record]]:
        """Take a call's answers: each cursor moves past its records or waits out its refusal (raising what
        must not be retried). The records to hand over, one list per partition that brought some."""
        self._in_flight -= 1
        self._busy.difference_update(c.partition for c in call.cursors)
        handed = []
        for cursor in call.cursors:
            answer = answers[cursor.partition]
            if isinstance(answer, PartitionRefusal):
                self._refused(cursor, answer)
                continue
            self._attempts.pop(cursor.partition, None)
            records = cursor.advance(answer)
            if records:
                handed.append(records)
        if handed:
            self.idle.reset()
        elif call.wait_ms == 0 and call.refusal is None:
            for cursor in call.cursors:
                self._not_before.setdefault(cursor.partition, self._clock() + self.reader.poll_idle_sleep_s)
        return handed

    def sleep_s(self) -> float:
        """How long until a cursor is due again (nothing in flight)."""
        now = self._clock()
        return max(0.0, min(self._not_before.values(), default=now) - now)

    def _refused(self, cursor: Cursor, refusal: "PartitionRefusal") -> None:
        err = refusal.error
        attempt = self._attempts[cursor.partition] = self._attempts.get(cursor.partition, 0) + 1
        if isinstance(err, OffsetOutOfRange) and refusal.log_start_offset >= 0:
            if 0 <= cursor.offset < refusal.log_start_offset:
                if not cursor.restart_at_log_start:
                    raise err
                cursor.offset = refusal.log_start_offset
                return
            if attempt * self.reader.poll_idle_sleep_s > self.reader.high_watermark_catch_up_s:
                raise err
            self._not_before[cursor.partition] = self._clock() + self.reader.poll_idle_sleep_s
            return
        delay_s = self.reader.router.note_failure(err, attempt, topic=self.topic, partition=cursor.partition)
        if delay_s is None:
            raise err
        self._not_before[cursor.partition] = self._clock() + delay_s


def group_by_leader(positions: list[tuple[int, int]], leaders: dict[int, "str | RaftbusError"]):
    """The calls that read `positions`: (leader address, its positions) for each leader in `leaders`, a leader's
    partitions split over calls of at most READER_FETCH_MANY_PARTITIONS_MAX; and a PartitionRefusal for each
    partition whose leader lookup failed."""
    by_address: dict[str, list[tuple[int, int]]] = {}
    refused: dict[int, PartitionRefusal] = {}
    for partition, offset in positions:
        address = leaders[partition]
        if isinstance(address, RaftbusError):
            refused[partition] = PartitionRefusal(address)
        else:
            by_address.setdefault(address, []).append((partition, offset))
    most = settings.READER_FETCH_MANY_PARTITIONS_MAX
    calls = [(address, group[i:i + most])
             for address, group in by_address.items() for i in range(0, len(group), most)]
    return calls, refused


def fetch_many_request(topic: str, positions: list[tuple[int, int]], max_wait_ms: int, max_bytes: int,
                       partition_bytes_max: int) -> pb.FetchManyRequest:
    return pb.FetchManyRequest(topic=topic, max_bytes=max_bytes, max_wait_ms=max_wait_ms, partitions=[
        pb.PartitionFetch(partition=p, offset=o, max_bytes=partition_bytes_max) for p, o in positions])


def many_answers(topic: str, positions: list[tuple[int, int]],
                 response: pb.FetchManyResponse) -> dict[int, FetchResult | PartitionRefusal]:
    """Each partition's FetchResult, or its PartitionRefusal, from a FetchMany answer to `positions`."""
    answers: dict[int, FetchResult | PartitionRefusal] = {}
    for (partition, offset), answer in zip(positions, response.partitions):
        if answer.HasField("error"):
            answers[partition] = PartitionRefusal(error_from_proto(answer.error), answer.log_start_offset,
                                                  answer.high_watermark)
        else:
            answers[partition] = fetch_result(topic, partition, _resolved(offset, answer), answer)
    return answers


def _resolved(offset: int, answer: pb.FetchResponse) -> int:
    """Where a FetchMany answer at `offset` starts: the offset itself, or what the broker resolved
    EARLIEST_TIMESTAMP_MS (the log start) and LATEST_TIMESTAMP_MS (the high watermark then: the first batch of an
    answer that waited for records, else the high watermark) to."""
    if offset >= 0:
        return offset
    if offset == EARLIEST_TIMESTAMP_MS:
        return answer.log_start_offset
    first = next(iter_stored_batches(answer.batches), None)
    return first.base_offset if first is not None else answer.high_watermark


class IdleTimer:
    """Tracks time since the last record for `idle_timeout_ms` (None: never expires)."""

    def __init__(self, idle_timeout_ms: int | None, clock: Callable[[], float]):
        self.idle_timeout_s = None if idle_timeout_ms is None else idle_timeout_ms / 1000
        self._clock = clock
        self._last_s = clock()

    def reset(self) -> None:
        self._last_s = self._clock()

    def expired(self) -> bool:
        return self.idle_timeout_s is not None and self._clock() - self._last_s >= self.idle_timeout_s

    def left_s(self) -> float | None:
        """Seconds until the timer expires (None: never)."""
        if self.idle_timeout_s is None:
            return None
        return max(0.0, self.idle_timeout_s - (self._clock() - self._last_s))

    def wait_ms(self, fetch_wait_ms: int) -> int:
        """The long-poll wait for the next fetch: fetch_wait_ms, shortened to the idle time left."""
        if self.idle_timeout_s is None:
            return fetch_wait_ms
        left_ms = int((self.idle_timeout_s - (self._clock() - self._last_s)) * 1000)
        return max(0, min(fetch_wait_ms, left_ms))
