"""What the parts of a broker hand its assembly: periodic tasks for the Raft loop thread, background threads, the
client port's servicers and interceptors, listeners of applied commands and leadership changes, and what to close
when the broker stops.

Each part registers its own (`part.register(registry)`); broker/server.py installs them on the Raft loop and the
gRPC server, and the component harness runs the same tasks by a manual clock (`run_due`).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PeriodicTask:
    """`run` on the Raft loop thread every `interval_ms` (0: every pass of the loop), first on the first pass."""

    name: str
    interval_ms: int
    run: Callable[[], None]


@dataclass(frozen=True)
class BackgroundThread:
    """`run(stopping)` on a thread of its own; it returns once `stopping` (the broker stopping) is set."""

    name: str
    run: Callable[[threading.Event], None]


class Registry:
    def __init__(self):
        self.tasks: list[PeriodicTask] = []
        self.threads: list[BackgroundThread] = []
        self.servicers: list = []  # (add_XServicer_to_server, servicer) pairs
        self.interceptors: list = []  # gRPC server interceptors, in the order they run
        self.applied_listeners: list[Callable[[object], None]] = []  # fn(group), loop thread
        self.leadership_listeners: list[Callable[[object], None]] = []  # fn(group), loop thread
        self.starters: list[Callable[[], None]] = []
        self.closers: list[Callable[[], None]] = []
        self._next_due_ms: list[float] = []
        self._started: list[threading.Thread] = []

    # ------------------------------------------------------------------ registering (the parts)
    def every(self, name: str, interval_ms: int, run: Callable[[], None]) -> None:
        if interval_ms < 0:
            raise ValueError(f"task {name}: interval_ms must be >= 0")
        self.tasks.append(PeriodicTask(name, interval_ms, run))
        self._next_due_ms.append(0.0)

    def thread(self, name: str, run: Callable[[threading.Event], None]) -> None:
        self.threads.append(BackgroundThread(name, run))

    def serve(self, servicers: list) -> None:
        self.servicers.extend(servicers)

    def intercept(self, interceptors: list) -> None:
        self.interceptors.extend(interceptors)

    def on_applied(self, listener: Callable[[object], None]) -> None:
        self.applied_listeners.append(listener)

    def on_leadership(self, listener: Callable[[object], None]) -> None:
        self.leadership_listeners.append(listener)

    def on_start(self, starter: Callable[[], None]) -> None:
        """`starter` runs once the client port serves, before the threads start (a listener of the part's own)."""
        self.starters.append(starter)

    def on_close(self, closer: Callable[[], None]) -> None:
        """`closer` runs when the broker stops, once the client port stopped."""
        self.closers.append(closer)

    # ------------------------------------------------------------------ running (the assembly)
    def install(self, loop) -> None:
        """Tasks and listeners onto a RaftLoop, in the order they were registered."""
        for task in self.tasks:
            loop.every(task.interval_ms, _named(task))
        loop.applied_listeners.extend(self.applied_listeners)
        loop.leadership_listeners.extend(self.leadership_listeners)

    def start(self, stopping: threading.Event, suffix: str) -> None:
        """What runs once the client port serves: the starters, then the threads."""
        for starter in self.starters:
            starter()
        self.start_threads(stopping, suffix)

    def start_threads(self, stopping: threading.Event, suffix: str) -> None:
        for background in self.threads:
            thread = threading.Thread(target=background.run, args=(stopping,), name=f"{background.name}-{suffix}",
                                      daemon=True)
            thread.start()
            self._started.append(thread)

    def join_threads(self, timeout_s: float) -> None:
        for thread in self._started:
            thread.join(timeout_s)

    def close(self) -> None:
        for closer in self.closers:
            try:
                closer()
            except Exception:
                log.exception("closing %s failed", getattr(closer, "__qualname__", closer))

    # ------------------------------------------------------------------ by hand (tests)
    def run_due(self, now_ms: float) -> list[str]:
        """Run every task whose time has come at `now_ms`, as the loop does (a task failing is logged, the others
        run); the names of those run."""
        ran = []
        for index, task in enumerate(self.tasks):
            if now_ms >= self._next_due_ms[index]:
                self._next_due_ms[index] = now_ms + task.interval_ms
                ran.append(task.name)
                try:
                    task.run()
                except Exception:
                    log.exception("periodic task %s failed", task.name)
        return ran


def _named(task: PeriodicTask) -> Callable[[], None]:
    """task.run under the task's name (the loop names a failing task in its log line)."""
    run = task.run

    def periodic() -> None:
        run()

    periodic.__name__ = periodic.__qualname__ = task.name
    return periodic
