"""The clock seam. Only the leader reads it, to stamp `now_ms` into commands; state machines never do."""
from __future__ import annotations

import threading
import time


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock tests move by hand."""

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self._now_ms = now_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now_ms

    def advance(self, ms: int) -> None:
        with self._lock:
            self._now_ms += ms
