"""A bytes-per-second bound on what a leader sends to its learners while they catch up (a token bucket)."""
from __future__ import annotations

from raftbus.broker.raft.clock import Clock, monotonic_s


class CatchUpThrottle:
    """Allows `bytes_per_s` on average with bursts of up to one second's worth; 0 means unlimited."""

    def __init__(self, bytes_per_s: int, clock: Clock = monotonic_s):
        if bytes_per_s < 0:
            raise ValueError("a catch-up throttle is >= 0 bytes/s (0: unlimited)")
        self.bytes_per_s = bytes_per_s
        self._clock = clock
        self._balance = float(bytes_per_s)
        self._at = clock()
        self.bytes_sent = 0
        self.refusals = 0

    def grant(self, sizes) -> int:
        """How many of the pieces (their sizes in bytes, in sending order) may leave now; those are counted. A
        piece larger than the whole budget leaves alone once the bucket is full, so no entry is ever stuck."""
        if self.bytes_per_s == 0:
            self.charge(sum(sizes))
            return len(sizes)
        now = self._clock()
        self._balance = min(float(self.bytes_per_s), self._balance + (now - self._at) * self.bytes_per_s)
        self._at = now
        granted, total = 0, 0
        for size in sizes:
            if total + size > self._balance and not (granted == 0 and self._balance >= self.bytes_per_s):
                break
            granted += 1
            total += size
        if granted < len(sizes):
            self.refusals += 1
        self.charge(total)
        return granted

    def charge(self, size_bytes: int) -> None:
        """Count bytes that leave anyway (snapshot chunks are never held back)."""
        self._balance -= size_bytes
        self.bytes_sent += size_bytes
