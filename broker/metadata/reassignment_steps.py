"""The next step of a partition reassignment, decided from the group's configuration (pure).

Order (each step waits until the previous one is applied, see raft/configuration.py): add every new replica as a
learner; promote each learner once it lacks at most `promote_lag_max` committed entries; move leadership off a
replica being removed; remove the old replicas one at a time; then record the target as the placement.
"""
from __future__ import annotations

from typing import NamedTuple

ADD_LEARNER, PROMOTE, HAND_OVER, REMOVE, COMPLETE, WAIT = (
    "add_learner", "promote", "hand_over", "remove", "complete", "wait")


class Step(NamedTuple):
    action: str
    broker_id: int | None = None


def next_step(voters, learners, target, lag: dict[int, int], leader_id: int, promote_lag_max: int) -> Step:
    """What the partition's leader does next to move its group from (voters, learners) to `target`."""
    wanted = set(target)
    stale = sorted(set(learners) - wanted)
    if stale:
        return Step(REMOVE, stale[0])
    for broker_id in target:
        if broker_id not in voters and broker_id not in learners:
            return Step(ADD_LEARNER, broker_id)
    catching_up = [b for b in target if b in learners]
    for broker_id in catching_up:
        if lag.get(broker_id, promote_lag_max + 1) <= promote_lag_max:
            return Step(PROMOTE, broker_id)
    if catching_up:
        return Step(WAIT)
    leaving = sorted(set(voters) - wanted)
    if leader_id in leaving:
        successor = next((b for b in target if b in voters and b != leader_id), None)
        return Step(HAND_OVER, successor) if successor is not None else Step(WAIT)
    if leaving:
        return Step(REMOVE, leaving[0])
    return Step(COMPLETE)
