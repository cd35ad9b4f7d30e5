"""Starting many new replicas at once: a bounded number at a time.

A new replica is awake until its group quiesces: its leader ticks and heartbeats, its followers answer. Thousands
of partitions created at once would wake thousands of groups on every broker: a Raft loop that cannot keep up with
their heartbeats lets followers' election timers fire, each new election costs more messages and durable term
writes, and the groups do not settle.

So the replica opener waits while `starting_max` replicas it started have not quiesced yet. Every broker opens
the new replicas of one metadata change in the same order, so the replicas of a group start at about the same
time on each of its brokers. A replica stops counting once it quiesces, or after `starting_timeout_ms` whatever
happens (so replicas that cannot settle, e.g. because a peer is down, never hold the others back for long).
Only when replicas are started changes; elections, votes and logs follow Raft as always.
"""
from __future__ import annotations

import threading
from collections.abc import Container

from raftbus.broker.raft.clock import Clock, monotonic_s


class StartingReplicas:
    """New replicas that have not quiesced yet (`started` and `settle` on the loop thread, `wait_for_room` on the
    opener thread)."""

    def __init__(self, starting_max: int, starting_timeout_ms: int, clock: Clock = monotonic_s):
        self.starting_max = starting_max
        self.timeout_s = starting_timeout_ms / 1000
        self._clock = clock
        self._started: dict[str, float] = {}
        self._room = threading.Condition()

    def started(self, group_id: str) -> None:
        with self._room:
            self._started[group_id] = self._clock()

    def settle(self, quiesced: Container) -> None:
        """Forget the replicas that quiesced, and those started `starting_timeout_ms` ago or longer. Called every
        loop pass: with nothing starting it returns before taking the lock."""
        if not self._started:
            return
        with self._room:
            if not self._started:
                return
            now = self._clock()
            done = [g for g, since in self._started.items() if g in quiesced or now - since >= self.timeout_s]
            for group_id in done:
                del self._started[group_id]
            if done:
                self._room.notify_all()

    def forget(self, group_id: str) -> None:
        with self._room:
            if self._started.pop(group_id, None) is not None:
                self._room.notify_all()

    def wait_for_room(self, stopping: threading.Event, poll_s: float = 0.1) -> None:
        """Block until fewer than `starting_max` replicas are starting (or the broker stops)."""
        with self._room:
            while len(self._started) >= self.starting_max and not stopping.is_set():
                self._room.wait(poll_s)

    def __len__(self) -> int:
        with self._room:
            return len(self._started)
