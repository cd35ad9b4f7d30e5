"""Goal: a broker's gossip tells its peers whether it is stopping, and a peer's word that it is stopping holds until
it says otherwise or its connection drops (a broker back from a restart is not taken for one still stopping)."""
from __future__ import annotations

import threading
from types import SimpleNamespace

from raftbus.broker.leaders import LeaderTable
from raftbus.broker.leadership.gossip import Gossip
from raftbus.broker.leadership.settings import LeadershipSettings
from raftbus.broker.raft.faults import FaultWatch


class Hub:
    def __init__(self, peers):
        self.peers, self.sent = set(peers), []

    def connected_peers(self):
        return set(self.peers)

    def send(self, peer, channel, message):
        self.sent.append((peer, message))


def gossip(peers=(2, 3)):
    quiescence = SimpleNamespace(live_peers=lambda: set(peers), take_led_changes=set, led={})
    loop = SimpleNamespace(quiescence=quiescence, awake={}, groups={})
    disk = SimpleNamespace(full=False)
    faults = FaultWatch(disk, {}, broker_group="broker")
    stopping = threading.Event()
    hub = Hub(peers)
    return Gossip(1, LeadershipSettings(), loop=loop, hub=hub, leaders=LeaderTable(stale_after_s=3.0),
                  faults=faults, stopping=stopping), hub, stopping


def test_every_round_says_whether_this_broker_is_stopping():
    rules, hub, stopping = gossip()
    rules.round()
    assert {peer: message["stopping"] for peer, message in hub.sent} == {2: False, 3: False}
    hub.sent.clear()
    stopping.set()
    rules.round()
    assert {peer: message["stopping"] for peer, message in hub.sent} == {2: True, 3: True}


def test_a_peer_stopping_is_kept_until_it_says_otherwise_or_disconnects():
    rules, _, _ = gossip()
    rules.on_control(2, {"stopping": True, "leaders": []})
    rules.on_control(3, {"leaders": []})
    assert rules.faults.peers_stopping == {2}
    rules.on_control(2, {"stopping": False, "leaders": []})
    assert rules.faults.peers_stopping == set()
    rules.on_control(3, {"stopping": True, "leaders": []})
    rules.on_peer(3, connected=False)
    assert rules.faults.peers_stopping == set()
