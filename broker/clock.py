"""The clock seam. Only the leader reads it, to stamp `now_ms` into commands; state machines never do.

`TermClock` is what queue partitions stamp: anchored when this broker's term of leadership of the group starts,
then advanced by the monotonic clock only, so a step of the wall clock during a term neither expires leases
early nor freezes them.
"""
from __future__ import annotations

import threading
import time


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


class TermClock:
    """Stamped time per replicated group, term-relative and monotonic.

    When this broker first stamps a command in a new term of the group, it anchors at the later of its wall clock
    and the latest time the group has applied (so time never goes back across leaders, and follows the wall
    clock after an outage of the whole group); within the term it adds only monotonic time elapsed since.
    """

    def __init__(self, clock):
        self._clock = clock
        self._lock = threading.Lock()
        self._anchors: dict[str, tuple[int, int, int]] = {}  # group_id -> (term, anchor_ms, monotonic_ms at anchor)

    def now_ms(self, group_id: str, term: int, applied_ms: int) -> int:
        """The time to stamp into a command of `group_id`, led by this broker in `term`; `applied_ms` is the latest
        stamped time the group's state machine has applied."""
        monotonic_ms = self._clock.monotonic_ms()
        with self._lock:
            anchor = self._anchors.get(group_id)
            if anchor is None or anchor[0] != term:
                anchor = (term, max(self._clock.now_ms(), applied_ms), monotonic_ms)
                self._anchors[group_id] = anchor
        return anchor[1] + monotonic_ms - anchor[2]

    def forget(self, group_id: str) -> None:
        with self._lock:
            self._anchors.pop(group_id, None)
