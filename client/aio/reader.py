"""AsyncReader: reads stream-topic partitions by offset, without a consumer group, from asyncio code.

    async with AsyncReader("127.0.0.1:7070") as reader:
        async for record in reader.iter_topic("orders", from_beginning=True, stop_at_end=True):
            ...

The same cursors, fetch decoding and idle timing as the sync Reader (client/reader.py): positions are
"earliest", "latest" or an offset; `stop_at_end` ends at the high watermark seen at the start. A read that
started at "earliest" and falls below the log start (retention) restarts there; one from an explicit offset
raises OffsetOutOfRange. A position above the high watermark (a new leader catching up) is retried for up
to `high_watermark_catch_up_ms`.

Fetching ahead: when a fetch of iter_partition returns records, its next one (at the position after those
records, with the wait the next round would give it) starts as an asyncio task before the first record is
handed over, so the broker's answer travels while the caller works. A fetch sent ahead that failed with a typed
error, or was cancelled (by `close()`), is made again in the iterating coroutine, where its error is handled as
any fetch's: the OffsetOutOfRange rules above, the router's own errors raised unchanged. iter_topic over several
partitions reads them with FetchMany calls as the sync Reader does (client/reader.py, ManyRead). Closing an
iterator (`break`, `aclose()`) cancels and awaits its calls in flight.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing

from raftbus.client import settings
from raftbus.client.credentials import TlsSource
from raftbus.client.errors import InvalidArgument, OffsetOutOfRange, RaftbusError
from raftbus.client.reader import EARLIEST, EARLIEST_TIMESTAMP_MS, LATEST, LATEST_TIMESTAMP_MS, Cursor, FetchResult, \
    IdleTimer, ManyRead, PartitionRefusal, Position, _ManyCall, checked_partitions, fetch_many_request, fetch_result, \
    group_by_leader, many_answers
from raftbus.client.records import Record
from raftbus.client.wire import raftbus_pb2 as pb

from raftbus.client.aio.lifecycle import AsyncClient
from raftbus.client.aio.router import AsyncRouter


class AsyncReader(AsyncClient):
    """Reads partitions by offset; an async context manager that closes its channels."""

    def __init__(self, bootstrap: str | list[str] | None = None, *, fetch_bytes_max: int = settings.FETCH_BYTES_MAX,
                 fetch_wait_ms: int = settings.FETCH_WAIT_MS, request_timeout_ms: int = settings.REQUEST_TIMEOUT_MS,
                 poll_idle_sleep_ms: int = settings.POLL_IDLE_SLEEP_MS,
                 high_watermark_catch_up_ms: int = settings.HIGH_WATERMARK_CATCH_UP_MS,
                 tls_ca: TlsSource = None, tls_cert: TlsSource = None, tls_key: TlsSource = None,
                 token: str | None = None):
        if fetch_bytes_max <= 0 or fetch_wait_ms < 0:
            raise InvalidArgument("need fetch_bytes_max > 0 and fetch_wait_ms >= 0")
        self.router = AsyncRouter(bootstrap, request_timeout_ms=request_timeout_ms,
                                  tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token)
        self.fetch_bytes_max = fetch_bytes_max
        self.fetch_wait_ms = fetch_wait_ms
        self.poll_idle_sleep_s = poll_idle_sleep_ms / 1000
        self.high_watermark_catch_up_s = high_watermark_catch_up_ms / 1000
        self._ahead: set[asyncio.Task] = set()  # fetches sent ahead by open iterators, cancelled by close()

    # ------------------------------------------------------------------ single calls

    async def partitions(self, topic: str) -> int:
        """How many partitions `topic` has; UnknownTopic if it does not exist."""
        return await self.router.partitions_for(topic)

    async def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """(log_start_offset, high_watermark) of the partition, from its leader."""
        answer = await self._list_offsets(topic, partition, EARLIEST_TIMESTAMP_MS)
        return answer.log_start_offset, answer.high_watermark

    async def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first offset whose batch has a timestamp >= timestamp_ms (the high watermark if none)."""
        if timestamp_ms < 0:
            raise InvalidArgument("timestamp_ms must be >= 0")
        return (await self._list_offsets(topic, partition, timestamp_ms)).offset

    async def _list_offsets(self, topic: str, partition: int, timestamp_ms: int) -> pb.ListOffsetsResponse:
        ask = pb.ListOffsetsRequest(topic=topic, partition=partition, timestamp_ms=timestamp_ms)
        return await self.router.call_partition(
            topic, partition, lambda conn: conn.log.ListOffsets(ask, timeout=self.router.request_timeout_s))

    async def fetch(self, topic: str, partition: int, offset: int, max_bytes: int | None = None,
                    max_wait_ms: int = 0) -> FetchResult:
        """One fetch from the leader: records at or above `offset`, long-polling up to max_wait_ms at the end."""
        ask = pb.FetchRequest(topic=topic, partition=partition, offset=offset,
                              max_bytes=max_bytes or self.fetch_bytes_max, max_wait_ms=max_wait_ms)
        wait_s = self.router.request_timeout_s + max_wait_ms / 1000
        answer = await self.router.call_partition(topic, partition, lambda conn: conn.log.Fetch(ask, timeout=wait_s))
        return fetch_result(topic, partition, offset, answer)

    # ------------------------------------------------------------------ async iterators

    async def cursor(self, topic: str, partition: int, offset: Position = EARLIEST,
                     stop_at_end: bool = False) -> Cursor:
        """Resolve "earliest"/"latest"/an offset into a Cursor (one ListOffsets call)."""
        if offset not in (EARLIEST, LATEST) and (type(offset) is not int or offset < 0):
            raise InvalidArgument(f"offset must be 'earliest', 'latest' or an offset >= 0, not {offset!r}")
        log_start, high_watermark = await self.offsets(topic, partition)
        start = {EARLIEST: log_start, LATEST: high_watermark}.get(offset, offset)
        return Cursor(partition, start, high_watermark if stop_at_end else None, offset == EARLIEST)

    async def iter_partition(self, topic: str, partition: int, offset: Position = EARLIEST,
                             stop_at_end: bool = False, idle_timeout_ms: int | None = None) -> AsyncIterator[Record]:
        """Records of one partition in offset order, by long-poll fetches; ends as the sync Reader's does.

        The fetch after a batch of records is sent ahead, before the first of them is handed over (see the module
        docstring).
        """
        cursors = [await self.cursor(topic, partition, offset, stop_at_end)]
        async with aclosing(self._follow(topic, cursors, idle_timeout_ms)) as records:
            async for record in records:
                yield record

    async def iter_topic(self, topic: str, from_beginning: bool = False, stop_at_end: bool = False,
                         idle_timeout_ms: int | None = None,
                         partitions: Iterable[int] | None = None) -> AsyncIterator[Record]:
        """Records of every partition (or of `partitions`); order within each partition is kept.

        As the sync Reader's iter_topic: several partitions are read with one FetchMany call per partition leader
        at a time, each long-polling until one of its partitions has records, the next call to a leader started
        as a task before the records of its last answer are handed over (client/reader.py, ManyRead decides); with
        `stop_at_end` each partition ends at the high watermark of its first answer. One partition is read as
        iter_partition reads it. Leaving the loop cancels and awaits the calls in flight.
        """
        numbers = checked_partitions(topic, partitions, await self.partitions(topic))
        if len(numbers) == 1:
            records = self.iter_partition(topic, numbers[0], EARLIEST if from_beginning else LATEST, stop_at_end,
                                          idle_timeout_ms)
        else:
            start = EARLIEST_TIMESTAMP_MS if from_beginning else LATEST_TIMESTAMP_MS
            cursors = [Cursor(p, start, None, from_beginning, end_pending=stop_at_end) for p in numbers]
            records = self._follow_many(topic, cursors, IdleTimer(idle_timeout_ms, asyncio.get_running_loop().time))
        async with aclosing(records) as records:
            async for record in records:
                yield record

    def _follow_cursors(self, topic: str, cursors: list[Cursor], idle_timeout_ms: int | None) -> AsyncIterator[Record]:
        """Records of `cursors` until each is done or the idle timer expires: one as iter_partition reads it,
        several as iter_topic does (AsyncTable's watches read their partitions from positions of their own)."""
        if len(cursors) == 1:
            return self._follow(topic, cursors, idle_timeout_ms)
        return self._follow_many(topic, cursors, IdleTimer(idle_timeout_ms, asyncio.get_running_loop().time))

    async def _follow_many(self, topic: str, cursors: list[Cursor], idle: IdleTimer) -> AsyncIterator[Record]:
        """Reads several cursors with FetchMany calls, one task in flight per leader, until each is done or the
        idle timer expires; the calls still in flight are cancelled and awaited when the read ends."""
        plan = ManyRead(self, topic, cursors, idle, asyncio.get_running_loop().time)
        in_flight: dict[asyncio.Future, _ManyCall] = {}
        try:
            while not plan.finished():
                await self._send_many(plan, in_flight)
                if not in_flight:
                    await asyncio.sleep(plan.sleep_s())
                    continue
                done, _ = await asyncio.wait(list(in_flight), timeout=idle.left_s(),
                                             return_when=asyncio.FIRST_COMPLETED)
                handed: list[list[Record]] = []
                for task in done:
                    call = in_flight.pop(task)
                    handed += plan.answered(call, await self._many_answers(topic, task, call))
                if handed:
                    await self._send_many(plan, in_flight)  # the next calls start before these records are handed
                    for records in handed:
                        for record in records:
                            yield record
        finally:
            await _cancelled(in_flight)

    async def _send_many(self, plan: ManyRead, in_flight: dict) -> None:
        """Start the calls of the cursors that are due (ManyRead.calls) as tasks."""
        due = plan.due()
        if not due:
            return
        leaders: dict[int, str | RaftbusError] = {}
        for cursor in due:
            try:
                leaders[cursor.partition] = await self.router.leader_address(plan.topic, cursor.partition)
            except RaftbusError as err:
                leaders[cursor.partition] = err
        by_leader, refused = group_by_leader([(c.partition, c.offset) for c in due], leaders)
        loop = asyncio.get_running_loop()
        for call in plan.calls(due, by_leader, refused):
            if call.refusal is not None:
                task = loop.create_future()
                task.set_result(call.refusal)
            else:
                task = loop.create_task(self._fetch_many_at(call.address, plan.topic, call.positions, call.wait_ms,
                                                            call.max_bytes))
                self._ahead.add(task)
                task.add_done_callback(self._ahead.discard)
            in_flight[task] = call

    async def _fetch_many_at(self, address: str, topic: str, positions: list[tuple[int, int]], max_wait_ms: int,
                             max_bytes: int) -> dict:
        """One FetchMany call to `address`, a leader of every partition in `positions`: each partition's FetchResult
        or PartitionRefusal (a failed call refuses all of them with its error)."""
        request = fetch_many_request(topic, positions, max_wait_ms, max_bytes, self.fetch_bytes_max)
        timeout_s = self.router.request_timeout_s + max_wait_ms / 1000
        try:
            response = await self.router.call_at(address,
                                                 lambda conn: conn.log.FetchMany(request, timeout=timeout_s))
        except RaftbusError as err:
            return {p: PartitionRefusal(err) for p, _ in positions}
        return many_answers(topic, positions, response)

    async def _many_answers(self, topic: str, task: asyncio.Future, call: _ManyCall) -> dict:
        """A call's answers. A call cancelled by close() is made again here, and a refusal of it raised: a closed
        reader ends the read with the error any call on it gets."""
        if not task.cancelled():
            return task.result()
        answers = await self._fetch_many_at(call.address, topic, call.positions, call.wait_ms, call.max_bytes)
        for answer in answers.values():
            if isinstance(answer, PartitionRefusal):
                raise answer.error
        return answers

    async def _follow(self, topic: str, cursors: list[Cursor], idle_timeout_ms: int | None) -> AsyncIterator[Record]:
        """Fetch the cursors round-robin until each is done or the idle timeout passes, sending fetches ahead after
        each answer with records; the fetches still outstanding are cancelled when the read ends."""
        idle = IdleTimer(idle_timeout_ms, asyncio.get_running_loop().time)
        ahead: dict[int, asyncio.Task] = {}  # partition → the fetch sent ahead at its cursor's position
        try:
            while not idle.expired() and (active := [c for c in cursors if not c.done()]):
                wait_ms = self._wait_ms(idle, len(active))
                found = 0
                for i, cursor in enumerate(active):
                    records = cursor.advance(await self._answer_at(topic, cursor, wait_ms, ahead))
                    if not records:
                        continue
                    found += len(records)
                    idle.reset()  # the wait sent ahead counts from these records, as the next round's would
                    self._send_ahead(ahead, topic, active[i + 1:] + active[:i + 1], self._wait_ms(idle, len(active)))
                    for record in records:
                        yield record
                if found:
                    idle.reset()
                elif wait_ms == 0 and not idle.expired():
                    await asyncio.sleep(self.poll_idle_sleep_s)
        finally:
            await _cancelled(ahead.values())

    def _send_ahead(self, ahead: dict[int, asyncio.Task], topic: str, cursors: list[Cursor], max_wait_ms: int) -> None:
        """Start the fetches of `cursors`, in that order, that are not done and have none outstanding, until
        READER_FETCHES_AHEAD_MAX are outstanding."""
        for cursor in cursors:
            if len(ahead) >= settings.READER_FETCHES_AHEAD_MAX:
                return
            if cursor.partition not in ahead and not cursor.done():
                ahead[cursor.partition] = self._fetch_ahead(topic, cursor, max_wait_ms)

    def _wait_ms(self, idle: IdleTimer, active: int) -> int:
        """One active partition long-polls at the end; several are fetched without waiting (and sleep when idle)."""
        return idle.wait_ms(self.fetch_wait_ms) if active == 1 else 0

    def _fetch_ahead(self, topic: str, cursor: Cursor, max_wait_ms: int) -> asyncio.Task:
        """Start the fetch at the cursor's position as a task; _answer_at takes its answer."""
        task = asyncio.get_running_loop().create_task(
            self.fetch(topic, cursor.partition, cursor.offset, max_wait_ms=max_wait_ms))
        self._ahead.add(task)
        task.add_done_callback(self._ahead.discard)
        return task

    async def _answer_at(self, topic: str, cursor: Cursor, max_wait_ms: int,
                         ahead: dict[int, asyncio.Task]) -> FetchResult:
        """The answer at the cursor's position: that of the fetch sent ahead for it when it succeeded, else that of
        a fetch made here (a failed or cancelled fetch sent ahead is dropped; this one's errors are raised)."""
        task = ahead.get(cursor.partition)
        if task is not None:
            await asyncio.wait([task])  # the task stays in `ahead` (to be cancelled) until it has ended
            del ahead[cursor.partition]
            if not task.cancelled() and not isinstance(task.exception(), RaftbusError):
                return task.result()
        return await self._fetch_at(topic, cursor, max_wait_ms)

    async def _fetch_at(self, topic: str, cursor: Cursor, max_wait_ms: int) -> FetchResult:
        attempt = 0
        while True:
            try:
                return await self.fetch(topic, cursor.partition, cursor.offset, max_wait_ms=max_wait_ms)
            except OffsetOutOfRange as err:
                attempt += 1
                log_start, _ = await self.offsets(topic, cursor.partition)
                if cursor.offset < log_start and cursor.restart_at_log_start:
                    cursor.offset = log_start
                elif cursor.offset < log_start or attempt * self.poll_idle_sleep_s > self.high_watermark_catch_up_s:
                    raise err
                else:
                    await asyncio.sleep(self.poll_idle_sleep_s)

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        """Close the channels and cancel the fetches sent ahead; a read still open fetches again, and ends with the
        closed router's error."""
        await self.router.close()
        await _cancelled(self._ahead)


async def _cancelled(tasks: Iterable[asyncio.Task]) -> None:
    """Cancel `tasks` and wait until they have ended, dropping their answers and errors."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
