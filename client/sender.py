"""The batching core shared by the stream Producer and the queue sender.

Both accumulate per-partition batches under one lock and send them from one background thread: a record
reserves room in a bounded buffer (blocking up to `max_block_ms`, then Overloaded); a partition's batches wait
in its PartitionLane (client/producer_lane.py), which decides what may be sent, resent or given up and under
which producer id and sequence. A partition's head batch is due when it closed, lingered `linger_ms`, has a batch
queued behind it or a flush is waiting. What differs (the request, how answers settle) is each sender's own.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

from raftbus.client.errors import Overloaded
from raftbus.client.producer_lane import LaneBatch, PartitionLane


class PendingBatch(LaneBatch):
    """What every batch of a sender carries: where it goes, its futures and its linger; the lane's bookkeeping."""

    __slots__ = ("topic", "partition", "futures", "size_bytes", "linger_until_s", "closed")

    def __init__(self, topic: str, partition: int, now_s: float, linger_s: float):
        super().__init__(now_s)
        self.topic = topic
        self.partition = partition
        self.futures: list[Future] = []
        self.size_bytes = 0
        self.linger_until_s = now_s + linger_s
        self.closed = False

    def fail(self, err: BaseException) -> None:
        for future in self.futures:
            if not future.done():
                future.set_exception(err)


class SenderCore:
    """Buffer budget, batch readiness, retry deadline and the sender thread; subclasses take and send batches."""

    def __init__(self, *, linger_ms: int, batch_bytes_max: int, buffer_bytes_max: int, delivery_timeout_ms: int,
                 max_block_ms: int, clock: Callable[[], float]):
        self.linger_s = linger_ms / 1000
        self.batch_bytes_max = batch_bytes_max
        self.buffer_bytes_max = buffer_bytes_max
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.max_block_s = max_block_ms / 1000
        self._clock = clock
        self._lock = threading.RLock()  # taken directly on hot paths; the condition waits on it
        self._cond = threading.Condition(self._lock)
        # Held while a thread sends the batches it took, so batches of one partition go out in the order taken;
        # the sender thread waits for it, a caller sending at once only tries it (never with the lock waited on).
        self._dispatching = threading.Lock()
        self._lanes: dict[tuple[str, int], PartitionLane] = {}
        self._open: dict[tuple[str, int], PendingBatch] = {}
        self._buffer_used_bytes = 0
        self._flushing = 0
        self._stopping = False
        self._thread: threading.Thread | None = None

    def _start_sender(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ buffer (caller holds the lock)
    def _reserve(self, size: int) -> None:
        """Take `size` bytes of the buffer, waiting up to max_block_ms for room; Overloaded after that."""
        deadline = self._clock() + self.max_block_s
        while self._buffer_used_bytes + size > self.buffer_bytes_max:
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise Overloaded(f"producer buffer full ({self.buffer_bytes_max} bytes) for {self.max_block_s} s")
            self._cond.wait(remaining)
            self._check_open()
        self._buffer_used_bytes += size

    def _check_open(self) -> None:
        """Raise if callers may no longer add records (the Producer raises once closed)."""

    # ------------------------------------------------------------------ readiness (caller holds the lock)
    def _due_s(self, head: PendingBatch, queued: int) -> float:
        """When a partition's head batch, never sent, may go (the lane's DueS): at once if it is closed,
        flushed, stopping or has one behind it, else after its linger."""
        if head.closed or self._flushing or self._stopping or queued > 1:
            return 0.0
        return head.linger_until_s

    def _take_ready(self, now_s: float) -> tuple[list, float | None]:
        """Take every batch that is due and may be sent now (the lanes decide, in queue order per partition), and
        how long to wait otherwise (lock held)."""
        ready: list = []
        wake_s: float | None = None
        for lane in self._lanes.values():
            if lane.queue:
                sent, at_s = lane.take(now_s, self._due_s)
                if sent:
                    ready += sent
                if at_s is not None and (wake_s is None or at_s < wake_s):
                    wake_s = at_s
        for batch in ready:
            self._taken(batch)
        return ready, None if wake_s is None else wake_s - now_s

    def _taken(self, batch: PendingBatch) -> None:
        """A batch leaves for the network: it takes no more records (lock held)."""
        batch.closed = True

    # ------------------------------------------------------------------ sender thread
    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    ready, wait_s = self._take_ready(self._clock())
                    if ready:
                        break
                    if self._stopping and self._sender_idle():
                        return
                    self._cond.wait(wait_s)
            with self._dispatching:
                for batch in ready:
                    self._dispatch(batch)

    def _sender_idle(self) -> bool:
        """Nothing is left for a stopping sender thread to do (lock held)."""
        raise NotImplementedError

    def _dispatch(self, batch: PendingBatch) -> None:
        """Send one batch; its answer arrives on another thread (lock not held)."""
        raise NotImplementedError
