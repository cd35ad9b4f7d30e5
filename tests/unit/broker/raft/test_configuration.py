"""Unit tests of a Raft group's configuration values, their entry codec and the catch-up throttle (no Raft, no sockets)."""
from __future__ import annotations

import io
import json

import pytest

from raftbus.broker.raft import configuration, snapshot_footer
from raftbus.broker.raft.configuration import Membership
from raftbus.broker.raft.throttle import CatchUpThrottle
from raftbus.client import errors


def test_steps_change_one_member_each():
    """Goal: add a learner, promote it, remove a voter; each step keeps the other members as they were."""
    start = Membership.of([1, 2, 3])
    learner = start.add_learner(4)
    assert (learner.voters, learner.learners) == ({1, 2, 3}, {4})
    promoted = learner.promote(4)
    assert (promoted.voters, promoted.learners) == ({1, 2, 3, 4}, set())
    assert promoted.remove(1).voters == {2, 3, 4}
    assert learner.remove(4) == Membership.of([1, 2, 3])
    demoted = promoted.demote(1)
    assert (demoted.voters, demoted.learners) == ({2, 3, 4}, {1})


@pytest.mark.parametrize("step, error", [
    (lambda m: m.add_learner(2), errors.InvalidReplicas),
    (lambda m: m.promote(2), errors.UnknownBroker),
    (lambda m: m.promote(9), errors.UnknownBroker),
    (lambda m: m.remove(9), errors.UnknownBroker),
    (lambda m: Membership.of([1]).remove(1), errors.InvalidReplicas),
    (lambda m: Membership.of([1]).demote(1), errors.InvalidReplicas),
    (lambda m: m.demote(9), errors.UnknownBroker),
])
def test_nonsense_steps_get_typed_errors(step, error):
    with pytest.raises(error):
        step(Membership.of([1, 2, 3]))


def test_entry_round_trip_and_refusals():
    """Goal: an entry carries the whole configuration and what it was derived from; anything else is refused."""
    entry = configuration.encode_change(Membership.of([1, 2], [3]), based_on=7)
    assert configuration.is_change(entry)
    assert configuration.decode_change(entry) == (7, {1, 2}, {3})
    body = entry[1 + len(configuration.MAGIC):]
    bad_bodies = [
        {"based_on": 1, "voters": [], "learners": []},                   # no voter
        {"based_on": 1, "voters": [1], "learners": [1]},                 # both
        {"based_on": "1", "voters": [1], "learners": []},                # types
        {"based_on": 1, "voters": [1], "learners": [], "extra": 1},      # fields
        {"based_on": 1, "voters": list(range(70)), "learners": []},      # over MEMBERS_MAX
    ]
    prefix = bytes([configuration.ENTRY_TYPE]) + configuration.MAGIC
    for bad in bad_bodies:
        with pytest.raises(configuration.ConfigurationCodecError):
            configuration.decode_change(prefix + json.dumps(bad).encode())
    for raw in (b"", bytes([0]) + configuration.MAGIC + body, prefix + b"\x80\x04pickle", prefix[:-1] + b"X" + body):
        with pytest.raises(configuration.ConfigurationCodecError):
            configuration.decode_change(raw)


def test_snapshot_footer_carries_membership_and_checks_its_shape():
    """Goal: the configuration travels in a snapshot footer; a malformed one is refused before use."""
    base = {"last": (b"a", 5, 1), "prev": (b"b", 4, 1), "cluster": ["1"], "data_len": 0, "data_index": 3,
            "entries": []}
    for value, ok in [((4, [1, 2], [3]), True), ((4, [], [3]), False), ((4, [1], ["3"]), False), ([4, [1], []], False)]:
        f = io.BytesIO()
        snapshot_footer.write_footer(f, {**base, "membership": value})
        if ok:
            assert snapshot_footer.read_footer(f)["membership"] == value
        else:
            with pytest.raises(snapshot_footer.SnapshotFooterError):
                snapshot_footer.read_footer(f)


class ManualClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_throttle_grants_the_budget_per_second():
    """Goal: pieces leave up to bytes_per_s, the rest waits for the bucket to refill; an oversize piece leaves
    alone once the bucket is full."""
    clock = ManualClock()
    throttle = CatchUpThrottle(1000, clock=clock)
    assert throttle.grant([400, 400, 400]) == 2
    assert throttle.grant([400]) == 0
    clock.now += 0.5
    assert throttle.grant([400, 400]) == 1
    clock.now += 10
    assert throttle.grant([5000, 10]) == 1
    assert throttle.grant([10]) == 0
    assert throttle.bytes_sent == 400 * 3 + 5000 and throttle.refusals == 5
    assert CatchUpThrottle(0).grant([1 << 30] * 3) == 3
    with pytest.raises(ValueError):
        CatchUpThrottle(-1)
