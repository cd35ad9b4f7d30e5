"""Lease-stream windows: which unsettled leases each lease stream of this broker delivered.

A lease stream keeps at most `max_in_flight` leases unsettled (like a prefetch count). Acks, nacks and deletes
arrive as separate calls on the same leader, so the queue service tells this registry which leases they
settled; the stream that delivered them gets room again and is woken. Extends move a held deadline, and a
lease past its deadline stops counting (it expired). The registry is leader-local bookkeeping for flow
control only: correctness lives in the replicated state machine.
"""
from __future__ import annotations

import threading


class StreamWindow:
    def __init__(self, group_id: str, limit: int):
        self.group_id = group_id
        self.limit = limit
        self.held: dict[int, int] = {}  # seq -> lease deadline (ms)


class StreamRegistry:
    def __init__(self):
        self._lock = threading.Lock()
        self._owners: dict[tuple[str, int], StreamWindow] = {}

    def open(self, group_id: str, limit: int) -> StreamWindow:
        return StreamWindow(group_id, limit)

    def close(self, window: StreamWindow) -> None:
        with self._lock:
            for seq in window.held:
                if self._owners.get((window.group_id, seq)) is window:
                    del self._owners[(window.group_id, seq)]
            window.held.clear()

    def delivered(self, window: StreamWindow, leases) -> None:
        """leases: (seq, deadline_ms) pairs the stream just delivered."""
        with self._lock:
            for seq, deadline_ms in leases:
                window.held[seq] = deadline_ms
                self._owners[(window.group_id, seq)] = window

    def room(self, window: StreamWindow, now_ms: int) -> int:
        """How many more leases the stream may deliver; expired leases stop counting."""
        with self._lock:
            expired = [seq for seq, deadline in window.held.items() if deadline <= now_ms]
            for seq in expired:
                del window.held[seq]
                if self._owners.get((window.group_id, seq)) is window:
                    del self._owners[(window.group_id, seq)]
            return window.limit - len(window.held)

    def earliest_deadline_ms(self, window: StreamWindow) -> int | None:
        with self._lock:
            return min(window.held.values(), default=None)

    def holding(self) -> bool:
        """Whether any stream holds unsettled leases (else settling needs no bookkeeping here)."""
        return bool(self._owners)

    def settled(self, group_id: str, seqs) -> bool:
        """Leases acked, nacked or deleted; True when a stream of this broker held one of them."""
        freed = False
        with self._lock:
            for seq in seqs:
                window = self._owners.pop((group_id, seq), None)
                if window is not None:
                    window.held.pop(seq, None)
                    freed = True
        return freed

    def extended(self, group_id: str, leases) -> None:
        """leases: (seq, new deadline_ms) pairs."""
        with self._lock:
            for seq, deadline_ms in leases:
                window = self._owners.get((group_id, seq))
                if window is not None:
                    window.held[seq] = deadline_ms
