"""Who leads which group, as far as this broker knows.

Replicas know their own group's leader from Raft. For groups hosted elsewhere, every broker tells its peers
which groups it leads (a small control message every `leader_gossip_interval_ms` and on every change), so any
broker can answer a client's metadata request with a leader for every partition.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class LeaderInfo:
    leader_id: int
    term: int
    isr: tuple[int, ...]
    seen_monotonic: float


class LeaderTable:
    def __init__(self, stale_after_s: float = 10.0):
        self._entries: dict[str, LeaderInfo] = {}
        self._lock = threading.Lock()
        self.stale_after_s = stale_after_s

    def learn(self, group_id: str, leader_id: int, term: int, isr) -> None:
        now = time.monotonic()
        with self._lock:
            known = self._entries.get(group_id)
            if known is None or term >= known.term:
                self._entries[group_id] = LeaderInfo(leader_id, term, tuple(isr), now)

    def forget_broker(self, broker_id: int) -> None:
        with self._lock:
            for group_id in [g for g, info in self._entries.items() if info.leader_id == broker_id]:
                del self._entries[group_id]

    def forget_group(self, group_id: str) -> None:
        with self._lock:
            self._entries.pop(group_id, None)

    def get(self, group_id: str) -> LeaderInfo | None:
        with self._lock:
            info = self._entries.get(group_id)
        if info is None or time.monotonic() - info.seen_monotonic > self.stale_after_s:
            return None
        return info
