"""The future `Producer.send` returns: a small view of one record inside its batch, settled once per batch.

A batch's records share one BatchOutcome (its base offset or its error, a condition to wait on); a record's
RecordFuture is that outcome plus the record's index and timestamp. Settling a batch is one step whatever its
size: no per-record work happens unless a caller asked for it (a callback, a waiter of
`concurrent.futures.wait`/`as_completed`, a `result()`), and RecordMetadata is built when it is read.

RecordFuture is a `concurrent.futures.Future`: `result`, `exception`, `done`, `add_done_callback`, `cancel`
(False: an accepted record cannot be cancelled), and it works with `concurrent.futures.wait` and
`as_completed`, which read the attributes `_condition`, `_state` and `_waiters` that it provides from the
outcome. Only the producer settles it (`set_result`/`set_exception` raise).
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from concurrent.futures._base import FINISHED, RUNNING
from typing import Any, Callable

from raftbus.client.records import RecordMetadata

LOGGER = logging.getLogger(__name__)


class BatchOutcome:
    """How one batch ended (base offset or error), shared by the futures of its records; settles once."""

    __slots__ = ("topic", "partition", "base_offset", "error", "done", "condition", "_watched")

    def __init__(self, topic: str, partition: int):
        self.topic = topic
        self.partition = partition
        self.base_offset = -1
        self.error: BaseException | None = None
        self.done = False
        self.condition = threading.Condition(threading.RLock())  # re-entrant: wait() acquires it once per future
        self._watched: list[RecordFuture] = []  # futures with callbacks or waiters, told when the batch settles

    def watch(self, future: "RecordFuture") -> None:
        """Tell `future` when the batch settles (caller holds the condition; the batch is not done)."""
        if future._hooks is None:
            future._hooks = ([], [])
            self._watched.append(future)

    def settle(self, base_offset: int, error: BaseException | None) -> bool:
        """Record the batch's answer, wake its waiters, then run its callbacks in record order, each once.
        False (and nothing changes) when it had already settled."""
        with self.condition:
            if self.done:
                return False
            self.base_offset, self.error, self.done = base_offset, error, True
            watched, self._watched = self._watched, []
            watched.sort(key=_index_of)
            for future in watched:
                for waiter in future._hooks[1]:
                    if error is None:
                        waiter.add_result(future)
                    else:
                        waiter.add_exception(future)
            self.condition.notify_all()
        for future in watched:
            callbacks = future._hooks[0]
            future._hooks = ((), future._hooks[1])
            for fn in callbacks:
                run_callback(fn, future)
        return True


def _index_of(future: "RecordFuture") -> int:
    return future._index


def run_callback(fn: Callable[[Future], Any], future: Future) -> None:
    try:
        fn(future)
    except Exception:  # a caller's callback must not break the producer (concurrent.futures logs them too)
        LOGGER.exception("exception calling callback for %r", future)


class RecordFuture(Future):
    """One record's future: see the module docstring."""

    __slots__ = ("_outcome", "_index", "_timestamp_ms", "_hooks")

    def __init__(self, outcome: BatchOutcome, index: int, timestamp_ms: int):  # Future.__init__ is not called
        self._outcome = outcome
        self._index = index
        self._timestamp_ms = timestamp_ms
        self._hooks: tuple[list, list] | None = None  # (callbacks, waiters) once asked for

    # ------------------------------------------------------------------ the Future API
    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self._outcome.done

    def done(self) -> bool:
        return self._outcome.done

    def result(self, timeout: float | None = None) -> RecordMetadata:
        outcome = self._outcome
        if not outcome.done:
            self._wait(timeout)
        if outcome.error is not None:
            raise outcome.error
        return RecordMetadata(outcome.topic, outcome.partition, outcome.base_offset + self._index, self._timestamp_ms)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._wait(timeout).error

    def add_done_callback(self, fn: Callable[[Future], Any]) -> None:
        outcome = self._outcome
        with outcome.condition:
            if not outcome.done:
                outcome.watch(self)
                self._hooks[0].append(fn)
                return
        run_callback(fn, self)

    def set_result(self, result: Any) -> None:
        raise RuntimeError("a record's future is settled by its producer")

    def set_exception(self, exception: BaseException | None) -> None:
        raise RuntimeError("a record's future is settled by its producer")

    def set_running_or_notify_cancel(self) -> bool:
        raise RuntimeError("a record's future is settled by its producer")

    def _wait(self, timeout: float | None) -> BatchOutcome:
        outcome = self._outcome
        if not outcome.done:
            with outcome.condition:
                if not outcome.condition.wait_for(lambda: outcome.done, timeout):
                    raise TimeoutError()
        return outcome

    def __repr__(self) -> str:
        outcome = self._outcome
        if not outcome.done:
            state = "running"
        elif outcome.error is not None:
            state = f"finished raised {type(outcome.error).__name__}"
        else:
            state = f"finished offset {outcome.base_offset + self._index}"
        return f"<RecordFuture {outcome.topic}/{outcome.partition} record {self._index} {state}>"

    # ------------------------------------------------------------------ what concurrent.futures.wait reads
    @property
    def _condition(self) -> threading.Condition:
        return self._outcome.condition

    @property
    def _state(self) -> str:
        return FINISHED if self._outcome.done else RUNNING

    @property
    def _waiters(self) -> list:
        """The waiters list of concurrent.futures.wait/as_completed (read with the condition held)."""
        if self._hooks is None:
            if self._outcome.done:
                self._hooks = ((), [])  # settled: waiters come and go, nobody adds results any more
            else:
                self._outcome.watch(self)
        return self._hooks[1]
