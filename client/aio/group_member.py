"""An AsyncConsumer's side of the group protocol, on the event loop: the sync Membership's flags, error
classification, lost-partition handling and listener calls, with join, sync, two-phase revocation, leave and
the heartbeat as coroutines. See client/groups/member.py and docs/groups.md for the protocol itself."""
from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

import grpc

from raftbus.client.errors import RaftbusError

from raftbus.client.aio.group_calls import AsyncGroupCalls
from raftbus.client.aio.lifecycle import typed
from raftbus.client.aio.shared import REJOIN, Assignment, MemberOptions, Membership, PartitionHooks

log = logging.getLogger(__name__)


class LoopWake(threading.Condition):
    """The condition the sync parts notify under (Membership's flags, Fetcher's arrivals), which also wakes
    coroutines waiting in `wait_for` on the event loop."""

    def __init__(self):
        super().__init__()
        self._news = asyncio.Event()

    def notify_all(self) -> None:
        super().notify_all()
        self._news.set()
        self._news = asyncio.Event()

    async def wait_for_news(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        """Return once `predicate()` holds or `timeout_s` has passed."""
        try:
            async with asyncio.timeout(timeout_s):
                while not predicate():
                    await self._news.wait()
        except TimeoutError:
            pass


class AsyncMembership(Membership):
    """Membership whose network steps are coroutines; `hooks.start_reading` and `hooks.commit_revoked` are too."""

    def __init__(self, calls: AsyncGroupCalls, options: MemberOptions, hooks: PartitionHooks, wake: LoopWake,
                 listener, clock: Callable[[], float]):
        super().__init__(calls, options, hooks, wake, listener, clock)
        self._beating: asyncio.Task | None = None

    async def handle(self) -> None:
        """Join or sync when flagged; a retriable failure is retried a moment later (fetching goes on)."""
        if not self.due():
            return
        try:
            if self.need_rejoin:
                self._lose_everything()
                await self._join()
            if self.need_sync:
                await self._sync()
        except RaftbusError as err:
            self._step_failed(err)

    def _step_failed(self, err: RaftbusError) -> None:
        """Gone from the group: join again. Retriable: try again a moment later. Anything else: the caller's."""
        if isinstance(err, REJOIN):
            self.flag_rejoin()
        elif err.retriable:
            log.info("group %s: membership call failed, retrying: %s", self.options.group, err)
            self._retry_at_s = self._clock() + self.calls.router.retry_backoff_max_s
        else:
            raise err

    async def _join(self) -> None:
        o = self.options
        joined = await self.calls.join(o.group, o.client_id, o.topics, o.session_timeout_ms, o.rebalance_timeout_ms)
        self.adopt_member(joined.member_id)
        if self._beating is None:
            interval_s = min(o.heartbeat_interval_ms, joined.heartbeat_interval_ms) / 1000
            self._beating = asyncio.get_running_loop().create_task(self._heartbeats(interval_s))

    async def _sync(self) -> None:
        member_id, generation = self.member
        self.need_sync = False  # a heartbeat flagging a newer generation meanwhile sets it again
        try:
            view = await self.calls.sync(self.options.group, member_id, generation)
            self._drop_lost(view.owned)
            if view.revoking:
                view = await self._revoke(view)
            gained = view.owned - self.assigned
            await self.hooks.start_reading(gained, (member_id, view.generation))
            self.adopt_assignment(member_id, view, gained)
        except BaseException:
            self.flag_sync()
            raise

    async def _revoke(self, view: Assignment) -> Assignment:
        """Phase one of giving partitions up: commit them (auto-commit), tell the listener, stop reading; then
        release them to their next owner with a second sync."""
        revoked = view.revoking & self.assigned
        if revoked and self.hooks.commit_revoked is not None:
            positions = self.hooks.positions()
            try:
                await self.hooks.commit_revoked({tp: positions[tp] for tp in revoked})
            except RaftbusError as err:
                log.info("commit of revoked partitions failed: %s", err)
        self.stop_revoked(revoked)
        return await self.calls.sync(self.options.group, self.member[0], view.generation, released=view.revoking)

    async def leave(self) -> None:
        """Tell the listener everything is revoked, stop reading, and leave the group (best effort)."""
        member_id = self.member[0]
        if not member_id or self.need_rejoin:
            return
        self.stop_revoked(self.assigned)
        try:
            await self.calls.leave(self.options.group, member_id)
        except RaftbusError as err:
            log.info("leaving group %s failed: %s", self.options.group, err)

    async def stop(self) -> None:
        if self._beating is not None:
            self._beating.cancel()
            await asyncio.gather(self._beating, return_exceptions=True)

    # ------------------------------------------------------------------ heartbeat task

    async def _heartbeats(self, interval_s: float) -> None:
        """Keep the member alive; a long-poll that answers `rebalance` flags a sync at once."""
        failures = 0
        while True:
            seen = self.member
            if not seen[0]:
                await self.wake.wait_for_news(lambda: self.member != seen, interval_s)
                continue
            started_s = self._clock()
            try:
                answer = await self.calls.heartbeat(self.options.group, *seen, int(interval_s * 1000))
                failures = 0
            except (grpc.RpcError, RaftbusError) as exc:
                failures += 1
                await self._heartbeat_failed(typed(exc), seen[0], failures, interval_s)
                continue
            if answer.rebalance and self.member == seen:
                self.flag_sync()
                await self.wake.wait_for_news(lambda: self.member != seen, interval_s)
            elif not answer.rebalance:  # answered without waiting (the controller was busy): keep the pace
                await asyncio.sleep(max(0.0, interval_s - (self._clock() - started_s)))

    async def _heartbeat_failed(self, failure: RaftbusError, member_id: str, failures: int, interval_s: float) -> None:
        if isinstance(failure, REJOIN):
            self.flag_rejoin(member_id)
            await self.wake.wait_for_news(lambda: self.member[0] != member_id, interval_s)
            return
        router = self.calls.router
        delay_s = router.note_failure(failure, min(failures, router.retries))
        await asyncio.sleep(min(interval_s, interval_s if delay_s is None else delay_s))
