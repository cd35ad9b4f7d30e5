"""Last heartbeat of every group member, kept in the controller's memory only (heartbeats are not Raft writes).

A broker that becomes controller knows no heartbeat times; it treats every member as having heartbeated when
it took over (`leading_since_ms`), which gives each member a full session timeout of grace after a failover.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping


class HeartbeatTable:
    def __init__(self):
        self._lock = threading.Lock()
        self._last_ms: dict[str, dict[str, int]] = {}
        self._leading_since_ms: int | None = None

    def beat(self, group: str, member_id: str, now_ms: int) -> None:
        with self._lock:
            self._last_ms.setdefault(group, {})[member_id] = now_ms

    def last_of(self, group: str) -> dict[str, int]:
        with self._lock:
            return dict(self._last_ms.get(group, {}))

    def leading_since(self, now_ms: int) -> int:
        """When this broker became controller (now, the first time it is asked after taking over)."""
        with self._lock:
            if self._leading_since_ms is None:
                self._leading_since_ms = now_ms
            return self._leading_since_ms

    def lost_leadership(self) -> None:
        with self._lock:
            self._leading_since_ms = None
            self._last_ms.clear()

    def keep_only(self, members_by_group: Mapping[str, set[str]]) -> None:
        """Forget members and groups that are gone (bounds the table by the groups' size)."""
        with self._lock:
            self._last_ms = {g: {m: t for m, t in times.items() if m in members_by_group[g]}
                             for g, times in self._last_ms.items() if g in members_by_group}
