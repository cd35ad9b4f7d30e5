"""The broker's one Raft loop: one thread drives every group of the broker over one transport.

Each iteration waits on the transport (sockets plus a wake-up), hands incoming messages to their groups, sends
the answers that queued (before any tick applies anything), ticks the groups that have work (a message, a
submitted command) right away and every awake group once per `tick_interval_ms` for timers (elections,
heartbeats), runs queued calls, then flushes outgoing frames.
Quiesced groups (`quiesce.py`) are not ticked at all until something wakes them.
One thread and one connection per broker pair, however many partitions there are.

The loop owns the Raft machinery's clock (`clock`, monotonic seconds, `broker/raft/clock.py`): its groups, their
Raft cores, the quiescence and the sender all read the time through it.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future
from typing import Callable

from raftbus.broker.raft.clock import Clock, monotonic_s, thread_cpu_s
from raftbus.broker.raft.durable_meta import DeferredMetaSync
from raftbus.broker.raft.early_votes import EarlyVotes
from raftbus.broker.raft.stall import LoopStallReporter
from raftbus.broker.raft.timers import timers_due

log = logging.getLogger(__name__)

CONTROL_CHANNEL = "ctl"
QUIESCE_CHANNEL = "~quiesce"  # quiesce.py: liveness, quiesce and wake messages between brokers


class RaftLoop:
    def __init__(self, *, tick_interval_ms: int = 50, housekeeping_interval_ms: int = 1000,
                 log_bytes_max: int | None = None, early_votes: EarlyVotes | None = None, clock: Clock = monotonic_s,
                 stall_report_ms: int = 0):
        self.clock = clock
        self.hub = None
        self.groups: dict[str, object] = {}
        self.awake: dict[str, object] = {}  # the groups ticked every tick interval (not quiesced)
        self.quiescence = None  # quiesce.Quiescence, attached by the broker
        self.tick_interval_s = tick_interval_ms / 1000
        self.housekeeping_interval_s = housekeeping_interval_ms / 1000
        self.log_bytes_max = log_bytes_max  # the Raft logs of all groups together, in memory
        self._dirty: set[str] = set()
        self._lock = threading.Lock()
        self._calls: deque = deque()
        self._periodic: list[list] = []  # [interval_s, next_due, fn]
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_id: int | None = None
        self.on_control: Callable[[int, object], None] = lambda peer, message: None
        self.applied_listeners: list[Callable[[object], None]] = []
        self.leadership_listeners: list[Callable[[object], None]] = []
        self.peer_listeners: list[Callable[[int, bool], None]] = []
        self.stopped_listeners: list[Callable[[object], None]] = []
        self.dropped_messages = 0
        self.early_votes = early_votes  # vote requests for groups not added yet (early_votes.py)
        self._applied_since_housekeeping = True
        self.durable_meta = DeferredMetaSync()  # terms and votes of a pass, made durable before it sends
        self.pass_started_s: float | None = None  # self.clock() at the start of the running pass (stall.py)
        self.pass_started_cpu_s = 0.0  # the loop thread's CPU time then
        self.stalls = LoopStallReporter(self, stall_report_ms)

    # ------------------------------------------------------------------ wiring
    def attach(self, hub) -> None:
        self.hub = hub
        hub.on_woken = self._pass_begins

    def _pass_begins(self) -> None:
        """The transport's wait ended: what follows is the pass (stall.py), the events it handles included."""
        self.pass_started_s = self.clock()
        if self.stalls.report_s:  # read only where a stall may be reported: one call less per pass otherwise
            self.pass_started_cpu_s = thread_cpu_s()

    def on_message(self, peer_id: int, channel: str, message) -> None:
        if channel == CONTROL_CHANNEL:
            self.on_control(peer_id, message)
            return
        group = self.groups.get(channel)
        if group is None:
            if channel == QUIESCE_CHANNEL and self.quiescence is not None:
                self.quiescence.on_message(peer_id, message)
                return
            if self.early_votes is None or not self.early_votes.keep(channel, peer_id, message):
                self.dropped_messages += 1  # a group not created here yet (or deleted): the sender retries
            return
        if self.quiescence is not None:
            self.quiescence.before_message(channel)
        group.transport.receive(peer_id, message, group.on_disk_fault)
        self._dirty.add(channel)

    def on_peer_connected(self, peer_id: int) -> None:
        for group in self.groups.values():
            group.transport.peer_connected(peer_id)
        if self.quiescence is not None:
            self.quiescence.on_peer(peer_id, True)
        for group in self.groups.values():
            group.on_peer_back(peer_id)
        for listener in self.peer_listeners:
            listener(peer_id, True)

    def on_peer_disconnected(self, peer_id: int) -> None:
        for group in self.groups.values():
            group.transport.peer_disconnected(peer_id)
        if self.quiescence is not None:
            self.quiescence.on_peer(peer_id, False)  # wakes the quiesced groups the peer replicates
        for group in self.groups.values():
            group.on_peer_lost(peer_id)  # after waking: a follower of the peer's groups stands for election sooner
        for listener in self.peer_listeners:
            listener(peer_id, False)

    # ------------------------------------------------------------------ called by groups (loop thread)
    def on_applied(self, group) -> None:
        self._applied_since_housekeeping = True
        for listener in self.applied_listeners:
            listener(group)

    def on_leadership_changed(self, group) -> None:
        for listener in self.leadership_listeners:
            listener(group)

    def on_group_stopped(self, group) -> None:
        """`group` crash-stopped (any thread): it no longer leads, applies or answers."""
        for listener in self.stopped_listeners:
            try:
                listener(group)
            except Exception:
                log.exception("stopped-group listener failed")
        for listener in self.leadership_listeners:
            listener(group)

    # ------------------------------------------------------------------ thread-safe entry points
    def mark_dirty(self, group_id: str) -> None:
        with self._lock:
            self._dirty.add(group_id)
        if self.hub is not None and threading.get_ident() != self._thread_id:
            self.hub.wakeup()

    def call_soon(self, fn: Callable[[], object]) -> Future:
        """Run fn on the loop thread; the future carries its result or exception."""
        future: Future = Future()
        with self._lock:
            self._calls.append((fn, future))
        if self.hub is not None:
            self.hub.wakeup()
        return future

    def call(self, fn: Callable[[], object], timeout_s: float = 30.0):
        if threading.get_ident() == self._thread_id:
            return fn()
        return self.call_soon(fn).result(timeout_s)

    def every(self, interval_ms: int, fn: Callable[[], None]) -> None:
        self._periodic.append([interval_ms / 1000, 0.0, fn])

    # ------------------------------------------------------------------ groups (loop thread)
    def add_group(self, group) -> None:
        self.groups[group.group_id] = group
        self.awake[group.group_id] = group
        for peer_id in self.hub.connected_peers():
            group.transport.peer_connected(peer_id)
        if self.early_votes is not None:
            for peer_id, message in self.early_votes.take(group.group_id):
                group.transport.receive(peer_id, message, group.on_disk_fault)
        self._dirty.add(group.group_id)

    def remove_group(self, group_id: str):
        group = self.groups.pop(group_id, None)
        self.awake.pop(group_id, None)
        if self.quiescence is not None:
            self.quiescence.on_removed(group_id)
        if group is not None:
            group.close()
        return group

    def suspend(self, group_id: str) -> None:
        """Stop ticking a group (it quiesced) until `resume`; what every replica has applied goes to its file only
        (housekeeping, which releases the awake groups' logs, skips it until then)."""
        group = self.awake.pop(group_id, None)
        release = getattr(group, "release_log", None)
        if release is not None:
            try:
                release()
            except Exception:
                log.exception("releasing the log of %s failed", group_id)

    def resume(self, group) -> None:
        if self.groups.get(group.group_id) is group:
            self.awake[group.group_id] = group
            self._dirty.add(group.group_id)

    # ------------------------------------------------------------------ running
    def start(self, name: str = "raftbus-raft-loop") -> None:
        self._thread = threading.Thread(target=self.run, name=name, daemon=True)
        self._thread.start()
        self.stalls.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        self.stalls.stop()
        if self.hub is not None:
            self.hub.wakeup()
        if self._thread is not None and threading.get_ident() != self._thread_id:
            self._thread.join(timeout_s)

    @property
    def thread_id(self) -> int | None:
        return self._thread_id

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self) -> None:
        self._thread_id = threading.get_ident()
        next_tick = 0.0
        next_housekeeping = 0.0
        while not self._stopping.is_set():
            try:
                next_tick, next_housekeeping = self.run_once(next_tick, next_housekeeping)
            except Exception:
                log.exception("raft loop iteration failed")
                self._stopping.wait(self.tick_interval_s)
        for group_id in list(self.groups):
            try:
                self.remove_group(group_id)
            except Exception:
                log.exception("closing group %s failed", group_id)
        self.durable_meta.close()

    def run_once(self, next_tick: float = 0.0, next_housekeeping: float = 0.0, *, wait: bool = True):
        """One iteration (tests drive the loop by hand with this)."""
        self.durable_meta.activate()
        try:
            return self._run_once(next_tick, next_housekeeping, wait)
        finally:
            self.durable_meta.deactivate()
            self.durable_meta.sync_pending()  # a pass that failed midway sends nothing before this either
            started_s, self.pass_started_s = self.pass_started_s, None
            self.stalls.pass_ended(started_s, self.pass_started_cpu_s)

    def _run_once(self, next_tick: float, next_housekeeping: float, wait: bool):
        now = self.clock()
        with self._lock:
            busy = bool(self._dirty or self._calls)
        timeout = 0.0 if busy or not wait else max(0.0, min(next_tick - now, self.tick_interval_s))
        self.hub.poll(timeout)
        if self.pass_started_s is None:  # a transport without on_woken
            self._pass_begins()
        if self.hub.has_pending():
            # Answers to what just arrived (a follower's acknowledgement of an append) leave now, not after the
            # ticks below, which may apply committed entries first: ticking must not lengthen a leader's commit.
            self.durable_meta.sync_pending()
            self.hub.flush()
        self._run_calls()
        now = self.clock()
        timers_due = now >= next_tick
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        if self.quiescence is not None:
            for group_id in dirty:
                self.quiescence.on_dirty(group_id)
        if timers_due:
            ticking = self._timers_due()
            next_tick = now + self.tick_interval_s
        else:
            ticking = [self.groups[g] for g in dirty if g in self.groups]
        for group in ticking:
            try:
                group.tick()
            except Exception:
                log.exception("tick of %s failed", group.group_id)
        if self.quiescence is not None:
            if timers_due:
                self.quiescence.on_tick()
            else:
                self.quiescence.on_ticked(ticking)
        if now >= next_housekeeping:
            next_housekeeping = now + self.housekeeping_interval_s
            self._housekeeping()
        self._run_periodic(now)
        self.durable_meta.sync_pending()
        self.hub.flush()
        return next_tick, next_housekeeping

    def _timers_due(self) -> list:
        """The awake groups whose timers may fire before the next tick (all of them without quiescence)."""
        if self.quiescence is None:
            return list(self.awake.values())
        horizon = self.clock() + self.tick_interval_s
        return [group for group in self.awake.values() if timers_due(group, horizon)]

    def _run_calls(self) -> None:
        while True:
            with self._lock:
                if not self._calls:
                    return
                fn, future = self._calls.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller
                future.set_exception(exc)

    def _run_periodic(self, now: float) -> None:
        for entry in self._periodic:
            interval, due, fn = entry
            if now >= due:
                entry[1] = now + interval
                try:
                    fn()
                except Exception:
                    log.exception("periodic task %s failed", getattr(fn, "__name__", fn))

    def _housekeeping(self) -> None:
        """Compaction of the awake groups (a quiesced group applies nothing and has no snapshot in progress), and
        the broker's log memory budget when something was applied since the last round."""
        for group in list(self.awake.values()):
            try:
                group.maybe_compact()
            except Exception:
                log.exception("compaction of %s failed", group.group_id)
        if self._applied_since_housekeeping:
            self._applied_since_housekeeping = self._bound_log_memory(list(self.groups.values()))

    def _bound_log_memory(self, groups) -> bool:
        """Over the broker's log memory budget, snapshot the group holding the most log first (whatever the copy
        costs), one more each housekeeping round until the logs fit again; whether it was over."""
        if self.log_bytes_max is None:
            return False
        sizes = [(group.log_bytes, group) for group in groups if hasattr(group, "log_bytes")]
        if sum(size for size, _ in sizes) <= self.log_bytes_max or not sizes:
            return False
        _, largest = max(sizes, key=lambda pair: pair[0])
        try:
            largest.maybe_compact(force=True)
        except Exception:
            log.exception("compaction of %s failed", largest.group_id)
        return True
