"""Source offsets as Spark checkpoints them, and the split of a per-trigger budget across partitions.

Spark stores a source offset as JSON; ours is Kafka's shape, {"topic": {"partition": next offset}}, one
entry per partition the source knew when it planned the batch.
"""
from __future__ import annotations

from raftbus.client.errors import InvalidArgument
from raftbus.client.spark.options import TopicPartition

Offsets = dict[TopicPartition, int]


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    """{("t", 0): 42} → {"t": {"0": 42}}, topics and partitions in order."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json(data: dict | None) -> Offsets:
    """The inverse of to_json; InvalidArgument on a shape Spark could not have stored from us."""
    offsets: Offsets = {}
    for topic, partitions in (data or {}).items():
        if not isinstance(partitions, dict):
            raise InvalidArgument(f"source offset for topic {topic!r} is not an object: {partitions!r}")
        for partition, offset in partitions.items():
            if not str(partition).isdigit() or type(offset) is not int or offset < 0:
                raise InvalidArgument(f"source offset {topic}/{partition}: {offset!r} is not an offset")
            offsets[(topic, int(partition))] = offset
    return offsets


def split_budget(lags: dict[TopicPartition, int], budget: int) -> dict[TopicPartition, int]:
    """How many records each partition may read this trigger, at most `budget` in all, in proportion to lag.

    Every partition with lag gets at least one record, so none starves; when the budget is smaller than the
    number of lagging partitions it is raised to that number. The rest of the budget goes in proportion to
    each partition's remaining lag, rounded down, and what rounding left over goes one record each to the
    largest remainders (ties in partition order), so the result is deterministic and sums to the budget.
    """
    total = sum(lag for lag in lags.values() if lag > 0)
    if total <= budget:
        return {tp: max(lag, 0) for tp, lag in lags.items()}
    lagging = sorted(tp for tp, lag in lags.items() if lag > 0)
    shares = {tp: (1 if tp in lags and lags[tp] > 0 else 0) for tp in lags}
    rest = budget - len(lagging)
    remaining_lag = total - len(lagging)
    if rest <= 0 or remaining_lag <= 0:
        return shares
    remainders = []
    for tp in lagging:
        whole, fraction = divmod(rest * (lags[tp] - 1), remaining_lag)
        shares[tp] += whole
        remainders.append((-fraction, tp))
    leftover = budget - sum(shares.values())
    for _, tp in sorted(remainders)[:leftover]:
        shares[tp] += 1
    return shares


def limit_ends(firsts: Offsets, ends: Offsets, budget: int) -> Offsets:
    """End offsets moved back so that at most `budget` records are read in all (split_budget's rules);
    a partition with nothing to read keeps its end."""
    shares = split_budget({tp: end - firsts[tp] for tp, end in ends.items()}, budget)
    return {tp: firsts[tp] + shares[tp] if end > firsts[tp] else end for tp, end in ends.items()}
