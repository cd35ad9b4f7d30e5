"""A consumer's heartbeat thread: keeps the member alive and tells the consumer when its assignment moved.

Each heartbeat long-polls the controller for up to one heartbeat interval and comes back early when the group's
generation differs from the member's, so a rebalance reaches the member at once. The thread never touches the
assignment itself: it flags the consumer (`on_rebalance`, `on_unknown`) and waits, on the consumer's condition,
until the consumer has synced to a new generation or the interval has passed.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from raftbus.client.errors import RaftbusError, UnknownGroup, UnknownMember
from raftbus.client.group_calls import GroupCalls

log = logging.getLogger(__name__)

MemberState = Callable[[], tuple[str, int]]  # (member_id, generation) as the consumer knows them now


class Heartbeat:
    def __init__(self, calls: GroupCalls, group: str, member: MemberState, wake: threading.Condition, *,
                 interval_ms: int, on_rebalance: Callable[[], None], on_unknown: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic):
        self.calls = calls
        self.group = group
        self.interval_s = interval_ms / 1000
        self.last_error: RaftbusError | None = None
        self._member = member
        self._wake = wake
        self._on_rebalance = on_rebalance
        self._on_unknown = on_unknown
        self._clock = clock
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"raftbus-heartbeat-{group}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        self._stopping.set()
        with self._wake:
            self._wake.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stopping.is_set():
            member_id, generation = self._member()
            if not member_id:
                self._wait_for_change((member_id, generation), self.interval_s)
                continue
            self._beat(member_id, generation)

    def _beat(self, member_id: str, generation: int) -> None:
        started = self._clock()
        try:
            latest, rebalance = self.calls.heartbeat(self.group, member_id, generation,
                                                     int(self.interval_s * 1000))
        except (UnknownMember, UnknownGroup) as err:
            self.last_error = err
            self._on_unknown()
            self._wait_for_change((member_id, generation), self.interval_s)
            return
        except RaftbusError as err:  # the router already retried; try again after a pause
            self.last_error = err
            log.debug("heartbeat failed: %s", err)
            self._stopping.wait(min(self.interval_s, 1.0))
            return
        self.last_error = None
        if rebalance and self._member() == (member_id, generation):
            self._on_rebalance()
            self._wait_for_change((member_id, generation), self.interval_s)
            return
        left_s = self.interval_s - (self._clock() - started)
        if left_s > 0 and not rebalance:  # answered without waiting (the controller was busy): keep the pace
            self._stopping.wait(left_s)

    def _wait_for_change(self, seen: tuple[str, int], timeout_s: float) -> None:
        with self._wake:
            self._wake.wait_for(lambda: self._stopping.is_set() or self._member() != seen, timeout_s)
