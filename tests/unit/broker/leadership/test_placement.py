"""Goal: leaders hand their groups to the preferred replica only when it is connected, not draining, not stopping,
has room and an undamaged store, and never while this broker drains or its disk is full; a draining broker hands
every group it leads (the metadata group included) to the lowest connected voter that is neither draining nor
stopping; a stopping broker first tells its peers, then hands each group it leads to its most caught-up voter that
is connected and not stopping, and stops waiting once no group it leads has one."""
from __future__ import annotations

from types import SimpleNamespace

from raftbus.broker.leadership.placement import LeaderPlacement
from raftbus.broker.leadership.settings import LeadershipSettings


class Group:
    def __init__(self, group_id, preferred, voters=(1, 2, 3), leader=True, match=None):
        self.group_id, self.preferred_leader, self.is_leader = group_id, preferred, leader
        self.membership = SimpleNamespace(voters=frozenset(voters))
        self.transferred, self.handed_to = False, []
        self.match = match or {}

    def most_caught_up(self, peers):
        return max(peers, key=lambda peer: (self.match.get(peer, 0), peer))

    def maybe_transfer_to_preferred(self):
        self.transferred = True

    def hand_over(self, target):
        self.handed_to.append(target)


def placement(groups, *, draining=(), connected=(2, 3), disk_full=False, peers_disk_full=(), peers_damaged=None,
              stopping=()):
    brokers = {b: SimpleNamespace(broker_id=b, draining=b in draining) for b in (1, 2, 3)}
    meta = Group("meta", 1)
    context = SimpleNamespace(node_id=1, metadata_sm=SimpleNamespace(brokers=lambda: brokers), metadata_group=meta,
                              partitions={g.group_id: SimpleNamespace(group=g) for g in groups})
    faults = SimpleNamespace(disk=SimpleNamespace(full=disk_full), peers_disk_full=set(peers_disk_full),
                             peers_damaged=peers_damaged or {}, peers_stopping=set(stopping))
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


def test_no_leadership_moves_to_a_stopping_peer():
    preferred = Group("p1.0", 2)
    rules, _ = placement([preferred], stopping={2})
    rules.prefer_leaders()
    assert not preferred.transferred
    led = Group("p1.1", 1)
    rules, meta = placement([led], draining={1}, stopping={2})
    rules.drain()
    assert meta.handed_to == [3] and led.handed_to == [3]


class Loop:
    """Runs what it is handed at once; a group handed over stops being led here after `moves_after` calls."""

    def __init__(self, groups, moves_after=1):
        self.groups = {g.group_id: g for g in groups}
        self.running, self.calls, self.moves_after = True, [], moves_after

    def call(self, fn, timeout_s):
        self.calls.append(fn.__name__)
        result = fn()
        for group in self.groups.values():
            if len(group.handed_to) >= self.moves_after:
                group.is_leader = False
        return result


def test_a_stopping_broker_tells_its_peers_then_hands_each_group_to_its_most_caught_up_voter_not_stopping():
    told = []
    behind, ahead = Group("p1.0", 1, match={2: 5, 3: 9}), Group("p1.1", 1, match={2: 9, 3: 9})
    stopping_peer, follower = Group("p1.2", 1, match={2: 9, 3: 3}), Group("p1.3", 2, leader=False)
    groups = [behind, ahead, stopping_peer, follower]
    rules, _ = placement(groups, stopping={2})
    loop = Loop(groups)
    rules.hand_off(loop, timeout_s=5.0, tell=lambda: told.append(True))
    assert told == [True] and loop.calls[0] == "<lambda>"
    assert (behind.handed_to, ahead.handed_to, stopping_peer.handed_to, follower.handed_to) == ([3], [3], [3], [])
    rules, _ = placement([ahead2 := Group("p2.0", 1, match={2: 9, 3: 9})])
    rules.hand_off(Loop([ahead2]), timeout_s=5.0, tell=lambda: None)
    assert ahead2.handed_to == [3]  # equally caught up: the highest id


def test_a_stopping_broker_whose_peers_are_all_gone_or_stopping_does_not_wait_out_the_bound():
    led = Group("p1.0", 1, match={2: 9, 3: 9})
    rules, _ = placement([led], connected=(2,), stopping={2})
    loop = Loop([led])
    rules.hand_off(loop, timeout_s=60.0, tell=lambda: None)
    assert led.handed_to == [] and led.is_leader and len(loop.calls) == 2  # told, then one look: nothing to do


def test_a_hand_off_retries_a_denied_hand_over_until_the_group_moves():
    led = Group("p1.0", 1, match={3: 9})
    rules, _ = placement([led])
    loop = Loop([led], moves_after=3)
    rules.hand_off(loop, timeout_s=60.0, tell=lambda: None)
    assert led.handed_to == [3, 3, 3] and not led.is_leader


def test_a_loop_not_running_hands_nothing():
    led = Group("p1.0", 1)
    rules, _ = placement([led])
    loop = Loop([led])
    loop.running = False
    rules.hand_off(loop, timeout_s=5.0, tell=lambda: None)
    assert loop.calls == [] and led.handed_to == []


def test_a_tell_that_fails_does_not_keep_the_groups_from_being_handed_off():
    led = Group("p1.0", 1, match={2: 9, 3: 9})
    rules, _ = placement([led])

    def tell():
        raise RuntimeError("no round")

    rules.hand_off(Loop([led]), timeout_s=5.0, tell=tell)
    assert led.handed_to == [3] and not led.is_leader
