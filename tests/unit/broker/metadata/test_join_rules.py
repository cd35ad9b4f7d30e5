"""Goal: the controller's rules for joining brokers and metadata voters, over a fake metadata group: a join adds a
learner only; a learner is promoted only once connected over the Raft port, acknowledging entries, caught up and
registered, and never past metadata_voters_max; a joined learner that does not get there within
membership_join_catch_up_timeout_ms is removed; a join naming an id another broker still holds at other addresses
is BROKER_ID_IN_USE."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

import pytest

from raftbus.broker import model
from raftbus.broker.metadata.settings import MembershipSettings
from raftbus.broker.metadata.voters import MembershipService
from raftbus.broker.raft.configuration import Membership
from raftbus.client import errors


def done(value) -> Future:
    future = Future()
    future.set_result(value)
    return future


@dataclass
class FakeGroup:
    """The metadata group as the controller sees it: its configuration, and which learners are caught up (what
    RaftGroup.caught_up_learners works out from the Raft core)."""

    membership: Membership
    caught_up: set = field(default_factory=set)
    is_leader: bool = True
    leader_id: int = 1
    refusals: int = 0  # the next proposals refused as MEMBERSHIP_CHANGE_IN_PROGRESS

    def propose_membership(self, step) -> Future:
        if self.refusals:
            self.refusals -= 1
            future = Future()
            future.set_exception(errors.MembershipChangeInProgress("another change is in flight"))
            return future
        self.membership = step(self.membership)
        return done(self.membership)

    def caught_up_learners(self, lag_entries_max: int) -> set[int]:
        return self.caught_up & self.membership.learners


class FakeStateMachine:
    def __init__(self, brokers):
        self.registered = {b.broker_id: b for b in brokers}

    def brokers(self):
        return self.registered


class FakeContext:
    node_id = 1

    def __init__(self, group: FakeGroup, brokers, alive=()):
        self.metadata_group = group
        self.metadata_sm = FakeStateMachine(brokers)
        self.alive = set(alive)

    def require_controller(self) -> None:
        if not self.metadata_group.is_leader:
            raise errors.NotLeader("not the controller")

    def run_on_loop(self, fn):
        return done(fn().result())

    def alive_brokers(self) -> set[int]:
        return self.alive | {self.node_id}

    def controller_id(self):
        return 1


class Peers:
    def __init__(self):
        self.expected = {}

    def expect(self, broker_id, raft_address):
        self.expected[broker_id] = raft_address

    def forget(self, broker_id):
        self.expected.pop(broker_id, None)


def broker(broker_id: int, state: str = model.ACTIVE) -> model.Broker:
    return model.Broker(broker_id, f"10.0.0.{broker_id}:7070", f"10.0.0.{broker_id}:7071", 0, state)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


SETTINGS = MembershipSettings(metadata_voters_max=5, membership_join_catch_up_timeout_ms=60_000)


def service(voters=(1, 2, 3), learners=(), brokers=(1, 2, 3), alive=(2, 3), settings=SETTINGS):
    group = FakeGroup(Membership.of(voters, learners))
    context = FakeContext(group, [broker(b) for b in brokers], alive)
    clock, peers = Clock(), Peers()
    return MembershipService(context, settings, peers, clock=clock), group, context, clock, peers


def test_a_join_adds_a_learner_only_and_dials_it():
    membership, group, _, _, peers = service()
    _, view = membership.join(4, "10.0.0.4:7070", "10.0.0.4:7071")
    assert (view.voters, view.learners) == ((1, 2, 3), (4,))
    assert peers.expected == {4: "10.0.0.4:7071"}
    membership.promote_caught_up()
    assert group.membership.voters == {1, 2, 3}  # not connected, never answered: not promoted


def test_a_learner_is_promoted_only_once_caught_up_over_the_raft_port_and_registered():
    membership, group, context, _, _ = service()
    membership.join(4, "10.0.0.4:7070", "10.0.0.4:7071")
    group.caught_up = {4}
    membership.promote_caught_up()
    assert group.membership.voters == {1, 2, 3}, "not registered yet"
    context.metadata_sm.registered[4] = broker(4)
    membership.promote_caught_up()
    assert group.membership.voters == {1, 2, 3, 4} and not group.membership.learners


def test_a_join_that_never_catches_up_is_removed_after_the_bound_and_the_voters_never_change():
    membership, group, _, clock, peers = service()
    for fake in (4, 5, 6):
        membership.join(fake, f"192.0.2.{fake}:7070", f"192.0.2.{fake}:7071")
    assert group.membership.learners == {4, 5, 6}
    clock.now += 59.0
    membership.promote_caught_up()
    assert group.membership.learners == {4, 5, 6}
    clock.now += 2.0
    for _ in range(3):  # one membership change per round
        membership.promote_caught_up()
    assert group.membership == Membership.of((1, 2, 3), ())
    membership.promote_caught_up()  # the round after a removal stops dialing it
    assert peers.expected == {}


def test_a_removal_refused_while_another_change_is_in_flight_is_proposed_again_at_once():
    membership, group, _, clock, _ = service()
    membership.join(4, "192.0.2.4:7070", "192.0.2.4:7071")
    clock.now += 61.0
    group.refusals = 1
    membership.promote_caught_up()
    assert group.membership.learners == {4}
    clock.now += 0.5  # the next check: the bound has not started again
    membership.promote_caught_up()
    assert group.membership == Membership.of((1, 2, 3), ())


def test_a_learner_seen_caught_up_is_not_removed_by_the_bound():
    settings = MembershipSettings(metadata_voters_max=3, membership_join_catch_up_timeout_ms=60_000)
    membership, group, context, clock, _ = service(settings=settings)
    membership.join(4, "10.0.0.4:7070", "10.0.0.4:7071")
    context.metadata_sm.registered[4] = broker(4)
    group.caught_up = {4}
    membership.promote_caught_up()
    clock.now += 120.0
    group.caught_up = set()  # restarting, say
    membership.promote_caught_up()
    assert group.membership.learners == {4}


def test_the_voters_never_exceed_metadata_voters_max():
    settings = MembershipSettings(metadata_voters_max=4, membership_join_catch_up_timeout_ms=60_000)
    membership, group, context, _, _ = service(settings=settings)
    for new in (4, 5, 6):
        membership.join(new, f"10.0.0.{new}:7070", f"10.0.0.{new}:7071")
        context.metadata_sm.registered[new] = broker(new)
    group.caught_up = {4, 5, 6}
    for _ in range(5):
        membership.promote_caught_up()
    assert group.membership.voters == {1, 2, 3, 4} and group.membership.learners == {5, 6}


def test_rejoining_an_id_held_elsewhere_is_refused_until_the_old_broker_is_gone():
    membership, group, context, _, peers = service()
    with pytest.raises(errors.BrokerIdInUse, match="broker 3 is in the cluster at 10.0.0.3:7070"):
        membership.join(3, "10.9.9.9:7070", "10.0.0.3:7071")  # another client address
    with pytest.raises(errors.BrokerIdInUse):
        membership.join(3, "10.0.0.3:7070", "10.9.9.9:7071")  # another Raft address
    assert group.membership == Membership.of((1, 2, 3)) and peers.expected == {}
    membership.join(3, "10.0.0.3:7070", "10.0.0.3:7071")  # the same broker again: answered, nothing changes
    assert group.membership == Membership.of((1, 2, 3))

    membership.join(4, "10.0.0.4:7070", "10.0.0.4:7071")  # joining, not registered yet
    with pytest.raises(errors.BrokerIdInUse):
        membership.join(4, "10.6.6.6:7070", "10.6.6.6:7071")

    # broker 3 retired: out of the metadata group and disconnected, still registered
    group.membership = Membership.of((1, 2), (4,))
    context.alive = {2}
    membership.join(3, "10.0.0.30:7070", "10.0.0.30:7071")
    assert 3 in group.membership.learners and peers.expected[3] == "10.0.0.30:7071"


def test_a_registered_broker_still_connected_keeps_its_id_though_out_of_the_group():
    membership, group, context, _, _ = service(voters=(1, 2), brokers=(1, 2, 3), alive=(2, 3))
    with pytest.raises(errors.BrokerIdInUse):
        membership.join(3, "10.9.9.9:7070", "10.9.9.9:7071")


def test_a_decommissioned_learner_is_neither_promoted_nor_timed_out():
    membership, group, context, clock, _ = service(voters=(1, 2), learners=(3,))
    context.metadata_sm.registered[3] = broker(3, model.DECOMMISSIONING)
    group.caught_up = {3}
    clock.now += 1000
    membership.promote_caught_up()
    membership.promote_caught_up()
    assert group.membership == Membership.of((1, 2), (3,))


def test_bad_addresses_are_refused_before_anything_changes():
    membership, group, _, _, peers = service()
    for address, raft in (("", "h:1"), ("h:1", "nowhere"), ("h:x", "h:1")):
        with pytest.raises(errors.InvalidArgument):
            membership.join(4, address, raft)
    assert group.membership == Membership.of((1, 2, 3)) and peers.expected == {}


def test_a_peers_list_longer_than_metadata_voters_max_is_refused():
    from raftbus.broker.settings import load_settings

    peers = ",".join(f"{i}@127.0.0.1:{7070 + i}" for i in range(1, 4))
    assert load_settings(peers=peers, raft_listen="127.0.0.1:7071", metadata_voters_max=3)
    with pytest.raises(errors.InvalidArgument, match="peers lists 3 brokers, more than metadata_voters_max=2"):
        load_settings(peers=peers, raft_listen="127.0.0.1:7071", metadata_voters_max=2)
