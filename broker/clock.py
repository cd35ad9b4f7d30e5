"""The clock seam. Only the leader reads it, to stamp `now_ms` into commands; state machines never do.

`TermClock` is what queue partitions stamp: anchored when this broker's term of leadership of the group starts,
then advanced by the monotonic clock only, so a step of the wall clock during a term neither expires leases
early nor freezes them. For the first `grace_ms` of a term it also keeps the leases whose deadlines fell between
the time the group had applied and the term's anchor (`Stamp`): leases that ran out while the group had no leader
are not expired before their consumers could reach the new leader to renew them.
"""
from __future__ import annotations

import threading
import time
from typing import NamedTuple


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock tests move by hand: `advance` lets time pass (wall and monotonic), `step_wall` only moves the wall
    clock (an NTP step, an operator setting the date)."""

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self._now_ms = now_ms
        self._monotonic_ms = 0
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now_ms

    def monotonic_ms(self) -> int:
        with self._lock:
            return self._monotonic_ms

    def advance(self, ms: int) -> None:
        with self._lock:
            self._now_ms += ms
            self._monotonic_ms += ms

    def step_wall(self, ms: int) -> None:
        with self._lock:
            self._now_ms += ms


class Stamp(NamedTuple):
    """The time a leader stamps into a queue command, and the leases its term's grace keeps.

    Leases whose deadline fell after the time the group had applied and no later than this term's anchor ran out
    while the group had no leader here: for the first grace_ms of the term they are kept (`kept_leases`), so
    their consumers can renew them; every other lease expires at its deadline."""

    now_ms: int
    held_ms: int        # the group's applied time when this term's clock anchored
    anchor_ms: int      # the term's clock at its anchor
    grace_ends_ms: int  # when the term's grace ends

    @property
    def kept_leases(self) -> tuple[int, int] | None:
        """(after, until): leases with deadlines after `after` and at or before `until` are kept now; None: none."""
        if self.now_ms >= self.grace_ends_ms or self.held_ms >= self.anchor_ms:
            return None
        return self.held_ms, self.anchor_ms

    def lease_expires_ms(self, deadline_ms: int) -> int:
        """When a lease with this deadline expires under this term's grace."""
        kept = self.held_ms < deadline_ms <= self.anchor_ms
        return max(deadline_ms, self.grace_ends_ms) if kept else deadline_ms


class TermClock:
    """Stamped time per replicated group, term-relative and monotonic.

    When this broker first stamps a command in a new term of the group, it anchors at the later of its wall clock
    and the latest time the group has applied (so time never goes back across leaders, and follows the wall
    clock after an outage of the whole group); within the term it adds only monotonic time elapsed since.
    """

    def __init__(self, clock, grace_ms: int = 0):
        self._clock = clock
        self._grace_ms = grace_ms
        self._lock = threading.Lock()
        # group_id -> (term, anchor_ms, monotonic_ms at anchor, applied_ms at anchor)
        self._anchors: dict[str, tuple[int, int, int, int]] = {}

    def stamp(self, group_id: str, term: int, applied_ms: int) -> Stamp:
        """The time to stamp into a command of `group_id`, led by this broker in `term`; `applied_ms` is the latest
        stamped time the group's state machine has applied."""
        monotonic_ms = self._clock.monotonic_ms()
        with self._lock:
            anchor = self._anchors.get(group_id)
            if anchor is None or anchor[0] != term:
                anchor = (term, max(self._clock.now_ms(), applied_ms), monotonic_ms, applied_ms)
                self._anchors[group_id] = anchor
        _, anchor_ms, anchor_monotonic_ms, held_ms = anchor
        return Stamp(anchor_ms + monotonic_ms - anchor_monotonic_ms, held_ms, anchor_ms, anchor_ms + self._grace_ms)

    def now_ms(self, group_id: str, term: int, applied_ms: int) -> int:
        return self.stamp(group_id, term, applied_ms).now_ms

    def forget(self, group_id: str) -> None:
        with self._lock:
            self._anchors.pop(group_id, None)
