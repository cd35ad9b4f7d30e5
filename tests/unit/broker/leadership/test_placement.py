"""Goal: leaders hand their groups to the preferred replica only when it is connected, not draining, has room and
an undamaged store, and never while this broker drains or its disk is full; a draining broker hands every group it
leads (the metadata group included) to the lowest connected voter that is not draining."""
from __future__ import annotations

from types import SimpleNamespace

from raftbus.broker.leadership.placement import LeaderPlacement
from raftbus.broker.leadership.settings import LeadershipSettings


class Group:
    def __init__(self, group_id, preferred, voters=(1, 2, 3), leader=True):
        self.group_id, self.preferred_leader, self.is_leader = group_id, preferred, leader
        self.membership = SimpleNamespace(voters=frozenset(voters))
        self.transferred, self.handed_to = False, []

    def maybe_transfer_to_preferred(self):
        self.transferred = True

    def hand_over(self, target):
        self.handed_to.append(target)


def placement(groups, *, draining=(), connected=(2, 3), disk_full=False, peers_disk_full=(), peers_damaged=None):
    brokers = {b: SimpleNamespace(broker_id=b, draining=b in draining) for b in (1, 2, 3)}
    meta = Group("meta", 1)
    context = SimpleNamespace(node_id=1, metadata_sm=SimpleNamespace(brokers=lambda: brokers), metadata_group=meta,
                              partitions={g.group_id: SimpleNamespace(group=g) for g in groups})
    faults = SimpleNamespace(disk=SimpleNamespace(full=disk_full), peers_disk_full=set(peers_disk_full),
                             peers_damaged=peers_damaged or {})
    hub = SimpleNamespace(connected_peers=lambda: set(connected))
    return LeaderPlacement(context, LeadershipSettings(), hub=hub, faults=faults), meta


def test_a_leader_moves_to_its_preferred_replica_when_it_can_take_it():
    ok, gone, draining, full, damaged, follower = (Group("p1.0", 2), Group("p1.1", 4), Group("p1.2", 3),
                                                   Group("p1.3", 2), Group("p1.4", 2), Group("p1.5", 2, leader=False))
    damaged.group_id = "p9.9"
    rules, _ = placement([ok, gone, draining, follower], draining={3})
    rules.prefer_leaders()
    assert [g.transferred for g in (ok, gone, draining, follower)] == [True, False, False, False]
    rules, _ = placement([full], peers_disk_full={2})
    rules.prefer_leaders()
    rules, _ = placement([damaged, ok], peers_damaged={2: {"p9.9"}})
    ok.transferred = False
    rules.prefer_leaders()
    assert not full.transferred and not damaged.transferred and ok.transferred


def test_nothing_moves_to_preferred_replicas_while_this_broker_drains_or_its_disk_is_full():
    group = Group("p1.0", 2)
    for options in ({"draining": {1}}, {"disk_full": True}):
        rules, _ = placement([group], **options)
        rules.prefer_leaders()
        assert not group.transferred


def test_a_draining_broker_hands_every_group_it_leads_to_the_lowest_connected_voter_not_draining():
    led, follower, alone = Group("p1.0", 1), Group("p1.1", 1, leader=False), Group("p1.2", 1, voters=(1, 3))
    rules, meta = placement([led, follower, alone], draining={1, 2}, connected=(2,))
    rules.drain()
    assert meta.handed_to == [] and led.handed_to == [] and alone.handed_to == []  # 2 drains, 3 is not connected
    rules, meta = placement([led, follower, alone], draining={1}, connected=(2, 3))
    rules.drain()
    assert (meta.handed_to, led.handed_to, follower.handed_to, alone.handed_to) == ([2], [2], [], [3])


def test_a_broker_that_does_not_drain_hands_nothing_away():
    led = Group("p1.0", 1)
    rules, meta = placement([led], draining={2})
    rules.drain()
    assert led.handed_to == [] and meta.handed_to == []
