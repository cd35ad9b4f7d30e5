"""A consumer's side of the group protocol: join, sync to a new generation, give up revoked partitions in two
phases, drop lost ones, and call the rebalance listener. It runs on the consumer's thread (inside poll); only
the flags (`flag_sync`, `flag_rejoin`) are set from other threads (the heartbeat, commit callbacks).

Giving up a revoked partition: commit it (with auto-commit), call `on_partitions_revoked` (the listener may
commit it itself: it is still owned), stop reading it, then release it, which hands it to its new owner.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from raftbus.client import settings
from raftbus.client.errors import (
    PartitionNotAssigned,
    RaftbusError,
    StaleGeneration,
    UnknownGroup,
    UnknownMember,
    UnknownPartition,
    UnknownTopic,
)
from raftbus.client.groups.calls import Assignment, GroupCalls, TopicPartition
from raftbus.client.groups.heartbeat import Heartbeat

log = logging.getLogger(__name__)

# Errors that mean the member's view of its assignment is out of date: sync again (a deleted topic's
# partitions leave the assignment with the next generation).
RESYNC = (StaleGeneration, PartitionNotAssigned, UnknownTopic, UnknownPartition)
# Errors that mean the member is gone from the group: join again.
REJOIN = (UnknownMember, UnknownGroup)


@dataclass(frozen=True)
class MemberOptions:
    group: str
    topics: tuple[str, ...]
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    heartbeat_interval_ms: int


@dataclass(frozen=True)
class PartitionHooks:
    """What membership needs from the consumer's fetching and committing."""

    positions: Callable[[], dict[TopicPartition, int]]
    stop_reading: Callable[[Iterable[TopicPartition]], None]
    # at the committed offset or the reset policy, read as the owner (member_id, generation of the assignment)
    start_reading: Callable[[Iterable[TopicPartition], tuple[str, int]], None]
    commit_revoked: Callable[[dict[TopicPartition, int]], object] | None  # None without auto-commit


class Membership:
    def __init__(self, calls: GroupCalls, options: MemberOptions, hooks: PartitionHooks, wake: threading.Condition,
                 listener, clock: Callable[[], float]):
        self.calls = calls
        self.options = options
        self.hooks = hooks
        self.listener = listener
        self.wake = wake
        self._clock = clock
        self.member: tuple[str, int] = ("", 0)  # (member_id, generation): replaced whole, read by the heartbeat
        self.assigned: frozenset[TopicPartition] = frozenset()
        self.need_sync = False
        self.need_rejoin = True
        self._retry_at_s = 0.0
        self._heartbeat: Heartbeat | None = None

    # ------------------------------------------------------------------ flags (any thread)
    def due(self) -> bool:
        return (self.need_sync or self.need_rejoin) and self._clock() >= self._retry_at_s

    def flag_sync(self) -> None:
        with self.wake:
            self.need_sync = True
            self.wake.notify_all()

    def flag_rejoin(self, member_id: str | None = None) -> None:
        """Join again, unless the news is about an earlier membership (`member_id` given and not current)."""
        with self.wake:
            if member_id is not None and member_id != self.member[0]:
                return
            self.need_rejoin = True
            self.wake.notify_all()

    def note_error(self, err: RaftbusError, member_id: str) -> None:
        """A fetch or commit error of `member_id` that says the assignment or the membership moved on."""
        if isinstance(err, REJOIN):
            self.flag_rejoin(member_id)
        elif isinstance(err, RESYNC) and member_id == self.member[0]:
            self.flag_sync()

    # ------------------------------------------------------------------ the consumer's thread
    def handle(self) -> None:
        """Join or sync when flagged; a retriable failure is retried a moment later (fetching goes on)."""
        if not self.due():
            return
        try:
            if self.need_rejoin:
                self._lose_everything()
                self._join()
            if self.need_sync:
                self._sync()
        except REJOIN:
            self.flag_rejoin()
        except RESYNC as err:  # the assignment moved on while gained partitions were being started
            if self.need_rejoin or not self.need_sync:
                raise
            log.info("group %s: assignment moved on, syncing again: %s", self.options.group, err)
            self._retry_at_s = self._clock() + settings.RETRY_BACKOFF_MS / 1000
        except RaftbusError as err:
            if not err.retriable:
                raise
            log.info("group %s: membership call failed, retrying: %s", self.options.group, err)
            self._retry_at_s = self._clock() + settings.RETRY_BACKOFF_MAX_MS / 1000

    def leave(self) -> None:
        """Tell the listener everything is revoked, stop reading, and leave the group (best effort)."""
        member_id = self.member[0]
        if not member_id or self.need_rejoin:
            return
        self.stop_revoked(self.assigned)
        try:
            self.calls.leave(self.options.group, member_id)
        except RaftbusError as err:
            log.info("leaving group %s failed: %s", self.options.group, err)

    def stop(self, timeout_s: float) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop(timeout_s)

    # ------------------------------------------------------------------ steps
    def _join(self) -> None:
        o = self.options
        answer = self.calls.join(o.group, "", o.client_id, o.topics, o.session_timeout_ms, o.rebalance_timeout_ms)
        self.adopt_member(answer.member_id)
        if self._heartbeat is None:
            self._heartbeat = Heartbeat(self.calls, o.group, lambda: self.member, self.wake,
                                        interval_ms=min(o.heartbeat_interval_ms, answer.heartbeat_interval_ms),
                                        on_rebalance=self.flag_sync, on_unknown=self.flag_rejoin, clock=self._clock)
            self._heartbeat.start()
        log.info("joined group %s as %s", o.group, answer.member_id)

    def _sync(self) -> None:
        member_id, generation = self.member
        with self.wake:
            self.need_sync = False  # a heartbeat flagging a newer generation meanwhile sets it again
        try:
            self._sync_to(member_id, self.calls.sync(self.options.group, member_id, generation))
        except BaseException:
            self.flag_sync()
            raise

    def _sync_to(self, member_id: str, view: Assignment) -> None:
        self._drop_lost(view.owned)
        if view.revoking:
            view = self._give_up(view)
        gained = view.owned - self.assigned
        self.hooks.start_reading(gained, (member_id, view.generation))
        self.adopt_assignment(member_id, view, gained)

    def adopt_member(self, member_id: str) -> None:
        """Joined as `member_id`: sync to its first generation next."""
        with self.wake:
            self.member = (member_id, 0)
            self.need_rejoin = False
            self.need_sync = True
            self.wake.notify_all()

    def adopt_assignment(self, member_id: str, view: Assignment, gained) -> None:
        """Synced to `view` (its gained partitions already positioned): own them and tell the listener."""
        with self.wake:
            self.assigned = view.owned
            self.member = (member_id, view.generation)
            self.need_sync = self.need_sync or bool(view.revoking)
            self.wake.notify_all()
        if gained:
            self._call_listener("on_partitions_assigned", set(gained))

    def _give_up(self, view: Assignment) -> Assignment:
        revoked = view.revoking & self.assigned
        if revoked and self.hooks.commit_revoked is not None:
            positions = self.hooks.positions()
            try:
                self.hooks.commit_revoked({tp: positions[tp] for tp in revoked})
            except RaftbusError as err:
                log.info("commit of revoked partitions failed: %s", err)
        self.stop_revoked(revoked)
        return self.calls.sync(self.options.group, self.member[0], view.generation, released=view.revoking)

    def stop_revoked(self, revoked) -> None:
        """Tell the listener `revoked` (still owned) is being given up, then stop reading it and drop it."""
        if revoked:
            self._call_listener("on_partitions_revoked", set(revoked))
        self.hooks.stop_reading(revoked)
        self.assigned = self.assigned - revoked

    def _drop_lost(self, owned: frozenset[TopicPartition]) -> None:
        lost = self.assigned - owned
        if lost:
            self.hooks.stop_reading(lost)
            self.assigned = self.assigned - lost
            self._call_listener("on_partitions_lost", set(lost))

    def _lose_everything(self) -> None:
        if self.assigned:
            self._drop_lost(frozenset())
        with self.wake:
            self.member = ("", 0)

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
