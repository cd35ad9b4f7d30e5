"""Goal: source offsets round-trip through Kafka's JSON shape and the per-trigger budget is split by lag
without starving any partition."""
import random

import pytest

from raftbus.client.errors import InvalidArgument
from raftbus.client.spark.offsets import from_json, limit_ends, split_budget, to_json


def test_offsets_round_trip_through_kafka_json():
    offsets = {("b", 1): 7, ("a", 0): 42, ("a", 10): 0}
    data = to_json(offsets)
    assert data == {"a": {"0": 42, "10": 0}, "b": {"1": 7}}
    assert from_json(data) == offsets
    assert from_json(None) == {}


@pytest.mark.parametrize("data", [{"a": [1]}, {"a": {"x": 1}}, {"a": {"0": -1}}, {"a": {"0": "1"}}])
def test_offsets_of_a_foreign_shape_are_refused(data):
    with pytest.raises(InvalidArgument):
        from_json(data)


def test_budget_above_total_lag_reads_everything():
    lags = {("t", 0): 5, ("t", 1): 0, ("t", 2): 3}
    assert split_budget(lags, 100) == lags


def test_budget_is_split_in_proportion_to_lag_with_one_record_each_first():
    lags = {("t", 0): 1000, ("t", 1): 100, ("t", 2): 1, ("t", 3): 0}
    shares = split_budget(lags, 111)
    assert sum(shares.values()) == 111
    assert shares[("t", 3)] == 0 and shares[("t", 2)] == 1
    assert shares[("t", 0)] > 9 * shares[("t", 1)] - 9


def test_budget_smaller_than_the_lagging_partitions_still_feeds_each_one():
    lags = {("t", p): 50 for p in range(5)}
    assert split_budget(lags, 3) == {("t", p): 1 for p in range(5)}


def test_seeded_random_splits_keep_every_rule():
    rng = random.Random(7)
    for _ in range(500):
        lags = {("t", p): rng.choice([0, 1, 2, rng.randint(0, 10_000)]) for p in range(rng.randint(1, 8))}
        budget = rng.randint(1, 20_000)
        shares = split_budget(lags, budget)
        lagging = [tp for tp, lag in lags.items() if lag > 0]
        assert set(shares) == set(lags)
        assert all(0 <= shares[tp] <= max(lags[tp], 0) for tp in lags)
        assert all(shares[tp] >= 1 for tp in lagging)
        total = sum(lags.values())
        assert sum(shares.values()) == (total if total <= budget else max(budget, len(lagging)))
        assert split_budget(lags, budget) == shares


def test_limited_ends_start_from_each_partitions_first_offset():
    firsts = {("t", 0): 100, ("t", 1): 0, ("t", 2): 7, ("t", 3): 9}
    ends = {("t", 0): 1100, ("t", 1): 100, ("t", 2): 7, ("t", 3): 5}  # t/3 went back: its end is kept
    limited = limit_ends(firsts, ends, 110)
    assert limited[("t", 2)] == 7 and limited[("t", 3)] == 5
    assert sum(limited[tp] - firsts[tp] for tp in (("t", 0), ("t", 1))) == 110
    assert limited[("t", 0)] - 100 > limited[("t", 1)]
    assert limit_ends(firsts, ends, 10_000) == ends
