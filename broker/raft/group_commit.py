"""Group commit: make applied state durable every `storage_sync_interval_ms`, off the Raft loop thread.

Stores are written with LMDB `sync=False` and Raft journals without syncing them, so an acknowledged record is
first durable only in the page cache of a majority of replicas. Every round
this thread syncs each group that applied something since the last round: its LMDB store first, then its Raft
journal (`RaftGroup.sync`), in that order, so the durable journal always covers the durable applied index.
A sync that fails crash-stops its group (`RaftGroup.stop`): a failed fsync is never retried and forgotten.

It also measures the **durability window**: for each round, the time from the first apply of the round to
the end of its syncs. That is how long an acknowledged record can sit only in page caches: the span a
simultaneous power loss of a majority could lose (docs/storage.md). The last `samples_max` windows are kept
for `percentiles()` (BrokerStats, `raftbus bench`).
"""
from __future__ import annotations

import logging
import threading
from collections import deque

from boltons.statsutils import Stats

from raftbus.broker.raft.clock import Clock, monotonic_s
from raftbus.broker.storage.base import is_disk_full

log = logging.getLogger(__name__)

WINDOW_SAMPLES_MAX = 4096


class GroupCommit:
    def __init__(self, interval_ms: int, *, samples_max: int = WINDOW_SAMPLES_MAX, clock: Clock = monotonic_s):
        self.interval_s = interval_ms / 1000
        self._clock = clock
        self._lock = threading.Lock()
        self._dirty: set = set()
        self._dirty_since: float | None = None
        self._windows_ms: deque[float] = deque(maxlen=samples_max)
        self.rounds = 0
        self.failures = 0

    # ------------------------------------------------------------------ any thread
    def mark(self, group) -> None:
        """`group` applied a command: sync it in the next round."""
        with self._lock:
            self._dirty.add(group)
            if self._dirty_since is None:
                self._dirty_since = self._clock()

    def forget(self, group) -> None:
        """`group` is being closed: never sync it again."""
        with self._lock:
            self._dirty.discard(group)

    def percentiles(self) -> dict:
        """p50, p99 and max of the recorded durability windows, in ms (None before the first round)."""
        with self._lock:
            windows = Stats(list(self._windows_ms))
        if not windows.count:
            return {"p50_ms": None, "p99_ms": None, "max_ms": None, "rounds": 0}
        return {"p50_ms": round(windows.get_quantile(0.50), 3), "p99_ms": round(windows.get_quantile(0.99), 3),
                "max_ms": round(windows.max, 3), "rounds": windows.count}

    # ------------------------------------------------------------------ the sync thread
    def run_once(self) -> None:
        """Sync every group marked since the last round and record the round's durability window."""
        with self._lock:
            groups, self._dirty = self._dirty, set()
            since, self._dirty_since = self._dirty_since, None
        if not groups:
            return
        for group in groups:
            try:
                group.sync()
            except Exception as exc:
                self.failures += 1
                log.exception("group commit of %s failed", getattr(group, "group_id", group))
                # After a failed fsync the kernel may have dropped the dirty pages it could not write, and the
                # next fsync may succeed without them (PostgreSQL's "fsyncgate"): nothing applied since the last
                # good sync can be trusted to be on disk, so the group crash-stops and recovers on restart. A sync
                # that failed for lack of space stops it as a full disk does: reopened from its journal (a restart
                # of that group) once there is room again.
                group.stop(f"fsync failed: {type(exc).__name__}: {exc}", disk_full=is_disk_full(exc))
        window_ms = (self._clock() - since) * 1000
        with self._lock:
            self._windows_ms.append(window_ms)
            self.rounds += 1

    def run(self, stopping: threading.Event) -> None:
        while not stopping.wait(self.interval_s):
            self.run_once()
        self.run_once()
