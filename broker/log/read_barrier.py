"""Linearizable reads on a partition leader: a read is served only once a no-op barrier proposed after the read
arrived has committed in this leader's term.

A leader that was deposed without knowing it yet (frozen, cut off, slow) still believes it leads and would
answer from its applied state, which misses what the new leader committed since. Its barrier cannot commit in
its own term (a majority has moved on), so the read fails (NOT_LEADER, LEADER_NOT_AVAILABLE or
REQUEST_TIMED_OUT, all retriable) and the client asks again elsewhere. When the barrier commits, every entry
committed before the read arrived precedes it in the log and is applied here, so the read sees it.

Barriers are shared: at most one is in flight per partition; reads arriving meanwhile wait for the next one,
which is proposed as soon as the one in flight completes. Under any read load a partition adds at most one
barrier entry per commit round trip. A barrier unanswered for `stale_after_s` is given up: the next read
proposes a fresh one rather than wait on it.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from raftbus.client import errors

from raftbus.broker import commands


class ReadBarrier:
    """The shared barriers of one partition replica (see the module docstring)."""

    def __init__(self, submit: Callable[[bytes], Future], stale_after_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self._submit = submit
        self._stale_after_s = stale_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._round = 0            # the barrier in flight (a given-up one completes without effect)
        self._in_flight = False
        self._since = 0.0          # when the barrier in flight was proposed
        self._next: Future | None = None  # what reads arriving while a barrier is in flight wait for

    def confirm(self) -> Future:
        """A future that completes (None, or the typed error) once a barrier proposed after this call commits."""
        now = self._clock()
        with self._lock:
            if self._next is None:
                self._next = Future()
            waiter = self._next
            start = not self._in_flight or now - self._since > self._stale_after_s
            if start:
                round_ = self._start(now)
        if start:
            self._propose(waiter, round_)
        return waiter

    def _start(self, now: float) -> int:
        """Mark a new barrier in flight (lock held); its round."""
        self._in_flight, self._next, self._since = True, None, now
        self._round += 1
        return self._round

    def _propose(self, waiter: Future, round_: int) -> None:
        try:
            proposed = self._submit(commands.READ_BARRIER_COMMAND)
        except Exception as exc:  # a broken group answers every waiting read with the error
            proposed = Future()
            proposed.set_exception(exc)
        proposed.add_done_callback(lambda done: self._completed(waiter, done, round_))

    def _completed(self, waiter: Future, proposed: Future, round_: int) -> None:
        error = proposed.exception()
        if error is None and isinstance(proposed.result(), errors.RaftbusError):
            error = proposed.result()
        following, next_round = None, 0
        with self._lock:
            if round_ == self._round:
                following, self._next, self._in_flight = self._next, None, False
                if following is not None:
                    next_round = self._start(self._clock())
        if error is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(error)
        if following is not None:
            self._propose(following, next_round)
