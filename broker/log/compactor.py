"""The compactor: a thread of each broker that cleans the compacted partitions it leads (docs/compaction.md).

Every `compaction_check_interval_ms` it walks the stream partitions this broker leads and, for each:
1. proposes the topic's cleanup policy when the partition has not applied it (after a create or `topics alter`);
2. on a partition switched to compact over records it already held, proposes backfills that index those records,
   newest first, `compaction_command_bytes_max` of stored batches each, until the index reaches the log start;
3. runs a pass when one is due: `segment_bytes` appended since the last pass, the oldest of them appended
   `max_compaction_lag_ms` ago, or a tombstone it kept reaching `delete_retention_ms`. A pass plans its commands
   here (log/compaction.py: reading batches and the key index, its key map within
   `compaction_key_map_bytes_max`), each within `compaction_command_bytes_max`, proposes each one stamped with the
   pass's time and waits for it before planning the next, reading at most `compaction_bytes_per_s`.

Nothing here runs on the Raft loop: the loop only applies the commands, one LMDB transaction each.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from raftbus.broker.context import wait_result
from raftbus.broker.log import compaction, compaction_commands

log = logging.getLogger(__name__)


@dataclass
class CompactionStats:
    """What this broker's compactor did since it started (BrokerStats, the bench)."""

    passes: int = 0
    commands: int = 0
    bytes_scanned: int = 0
    bytes_removed: int = 0
    records_removed: int = 0
    busy_s: float = 0.0       # time spent in passes (planning, proposing, waiting, throttled)
    key_map_peak_bytes: int = 0
    backfills: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Compactor:
    def __init__(self, context, settings, service, *, monotonic=time.monotonic):
        self.context = context
        self.settings = settings
        self.service = service
        self.stats = CompactionStats()
        self._monotonic = monotonic
        self._tombstones_due: dict[str, int] = {}  # group id -> when a kept tombstone may go
        self._budget_since = monotonic()
        self._budget_bytes = 0

    def run(self, stopping: threading.Event) -> None:
        while not stopping.wait(self.settings.compaction_check_interval_ms / 1000):
            try:
                self.run_once(stopping)
            except Exception:
                log.exception("compaction check failed")

    def run_once(self, stopping: threading.Event | None = None) -> int:
        """One look at every stream partition led here; how many passes ran."""
        passes = 0
        for replica, topic in self.context.led_partitions("stream"):
            if stopping is not None and stopping.is_set():
                break
            try:
                passes += self._check(replica, topic, stopping)
            except Exception as exc:  # a lost leadership, a timeout: the next check tries again
                log.info("compaction of %s/%d stopped: %s", topic.name, replica.partition, exc)
        return passes

    def _check(self, replica, topic, stopping) -> int:
        config = topic.compaction
        sm = replica.state_machine
        state = sm.compaction_state()
        if state.compacted != config.compacted:
            self._wait(self.service.sync_policy(replica, config.compacted))
            return 0
        if not config.compacted:
            return 0
        log_start, _ = sm.offsets()
        if not state.index_ready(log_start):
            start = sm.backfill_start(state.index_from, self.settings.compaction_command_bytes_max)
            self._wait(replica.group.submit(compaction_commands.encode_backfill(start, state.index_from)))
            with self.stats.lock:
                self.stats.backfills += 1
            return 0
        if not self._due(replica, config, state):
            return 0
        self.compact(replica, config, stopping)
        return 1

    def _due(self, replica, config, state) -> bool:
        now_ms = self.context.clock.now_ms()
        dirty_bytes, first_ms = replica.state_machine.dirty(state.cleaned_offset)
        if first_ms is not None and first_ms <= now_ms - config.min_compaction_lag_ms:
            if dirty_bytes >= config.segment_bytes or first_ms <= now_ms - config.max_compaction_lag_ms:
                return True
        due = self._tombstones_due.get(replica.group_id)
        return due is not None and due <= now_ms

    def compact(self, replica, config, stopping=None) -> None:
        """One pass over the partition's log, from its start to its last batch (kept out), as its leader."""
        sm = replica.state_machine
        end = sm.last_batch_offset()
        start, _ = sm.offsets()
        if end is None:
            return
        began = self._monotonic()
        now_ms = self.context.clock.now_ms()
        knobs = compaction.Knobs(config.min_compaction_lag_ms, config.delete_retention_ms)
        key_map = compaction.KeyMap(self.settings.compaction_key_map_bytes_max)
        key_map.lookup = lambda key: sm.lookup(key)[0]
        bytes_max = self.settings.compaction_command_bytes_max
        due_ms = None
        while stopping is None or not stopping.is_set():
            batches = sm.stored_batches(start, bytes_max)
            step = compaction.plan_step(batches, key_map, now_ms, knobs, end, bytes_max)
            if step.rewrites or step.finished:
                cleaned = step.next_offset if step.finished else -1
                self._wait(replica.group.submit(compaction_commands.encode_compact(now_ms, cleaned, step.rewrites)))
            self._count(step, key_map)
            if step.tombstone_due_ms is not None:
                due_ms = step.tombstone_due_ms if due_ms is None else min(due_ms, step.tombstone_due_ms)
            self._throttle(step.scanned_bytes, stopping)
            if step.finished:
                break
            start = step.next_offset
        if due_ms is None:
            self._tombstones_due.pop(replica.group_id, None)
        else:
            self._tombstones_due[replica.group_id] = due_ms
        with self.stats.lock:
            self.stats.passes += 1
            self.stats.busy_s += self._monotonic() - began

    def _count(self, step: compaction.Step, key_map: compaction.KeyMap) -> None:
        with self.stats.lock:
            stats = self.stats
            stats.commands += 1 if step.rewrites or step.finished else 0
            stats.bytes_scanned += step.scanned_bytes
            stats.bytes_removed += step.removed_bytes
            stats.records_removed += step.removed_records
            stats.key_map_peak_bytes = max(stats.key_map_peak_bytes, key_map.peak_bytes)

    def _throttle(self, scanned_bytes: int, stopping) -> None:
        """Sleep so that this broker reads at most compaction_bytes_per_s (over the last second or so)."""
        now = self._monotonic()
        if now - self._budget_since > 1.0:
            self._budget_since, self._budget_bytes = now, 0
        self._budget_bytes += scanned_bytes
        ahead_s = self._budget_bytes / self.settings.compaction_bytes_per_s - (now - self._budget_since)
        if ahead_s > 0:
            if stopping is not None:
                stopping.wait(ahead_s)
            else:
                time.sleep(ahead_s)

    def _wait(self, future) -> None:
        if future is not None:
            wait_result(future, self.settings.produce_timeout_ms / 1000)
