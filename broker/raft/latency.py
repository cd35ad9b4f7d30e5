"""A latency histogram filled on the hot path and read by a metrics scrape: fixed buckets, one lock, no labels.

Raft groups own theirs (commit and fsync latency); the collector turns them into Prometheus histograms
labelled with the group's topic and partition at scrape time, so a dropped replica leaves no series behind.
"""
from __future__ import annotations

import bisect
import threading
from typing import NamedTuple

# Upper bounds in seconds: sub-millisecond commits on loopback up to multi-second stalls.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class HistogramSnapshot(NamedTuple):
    buckets: tuple[tuple[float, int], ...]  # (upper bound s, cumulative count), ending with (inf, count)
    sum_s: float
    count: int


class LatencyHistogram:
    def __init__(self, bounds_s: tuple[float, ...] = LATENCY_BUCKETS_S):
        if list(bounds_s) != sorted(set(bounds_s)) or not bounds_s:
            raise ValueError("histogram bounds must be distinct and increasing")
        self._bounds = tuple(bounds_s)
        self._counts = [0] * (len(bounds_s) + 1)
        self._sum_s = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        slot = bisect.bisect_left(self._bounds, seconds)
        with self._lock:
            self._counts[slot] += 1
            self._sum_s += seconds

    def snapshot(self) -> HistogramSnapshot:
        with self._lock:
            counts, total_s = list(self._counts), self._sum_s
        cumulative, buckets = 0, []
        for bound, count in zip((*self._bounds, float("inf")), counts):
            cumulative += count
            buckets.append((bound, cumulative))
        return HistogramSnapshot(tuple(buckets), total_s, cumulative)
