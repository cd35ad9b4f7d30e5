"""Goal: the latency histogram Raft groups fill (commit, fsync) counts into cumulative buckets ending at +Inf
and keeps the sum, as Prometheus histograms expect."""
from __future__ import annotations

import pytest

from raftbus.broker.raft.latency import LatencyHistogram


def test_histogram_counts_cumulatively_with_an_infinite_last_bucket():
    histogram = LatencyHistogram((0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.005, 2.0):
        histogram.observe(seconds)
    snap = histogram.snapshot()
    assert snap.buckets == ((0.001, 2), (0.01, 3), (float("inf"), 4))
    assert snap.count == 4 and snap.sum_s == pytest.approx(2.0065)


def test_histogram_rejects_unordered_bounds():
    with pytest.raises(ValueError):
        LatencyHistogram((0.01, 0.001))
