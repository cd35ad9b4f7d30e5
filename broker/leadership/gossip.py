"""This broker's side of the leader gossip (leaders.py): each round it tells its peers what changed among the
groups it leads, with its disk state, its damaged stores and whether it is stopping; from theirs it learns who
leads what elsewhere and which peers cannot take leaderships (a full disk, a damaged store, a broker stopping)."""
from __future__ import annotations

import threading

from raftbus.broker.leaders import LeaderGossip, LeaderTable
from raftbus.broker.leadership.settings import LeadershipSettings
from raftbus.broker.raft.loop import CONTROL_CHANNEL

DUE_CHECK_INTERVAL_MS = 50  # a round asked for (a leadership change, a peer connecting) goes out within this


class Gossip:
    def __init__(self, node_id: int, settings: LeadershipSettings, *, loop, hub, leaders: LeaderTable, faults,
                 stopping: threading.Event):
        self.node_id = node_id
        self.settings = settings
        self.loop = loop  # RaftLoop: its groups, awake groups and quiescence
        self.hub = hub
        self.leaders = leaders
        self.faults = faults
        self.stopping = stopping  # set once this broker stops: its peers stop handing it leaderships
        self.gossip = LeaderGossip(full_every_rounds=settings.full_every_rounds)
        self._due = True
        self._led_quiesced: dict[str, tuple] = {}  # quiesced group led here → (term, isr) as last gossiped
        self._led_awake: set[str] = set()  # awake groups led here at the last round
        self._live: frozenset | None = None  # the live brokers the quiesced entries were worked out with

    def register(self, registry) -> None:
        registry.every("leader gossip when due", DUE_CHECK_INTERVAL_MS, self.round_if_due)
        registry.every("leader gossip", self.settings.leader_gossip_interval_ms, self.round)
        registry.on_leadership(self.flag)

    # ------------------------------------------------------------------ events (loop thread, unless said)
    def flag(self, _group=None) -> None:
        """A round is due (a leadership changed here)."""
        self._due = True

    def on_peer(self, peer_id: int, connected: bool) -> None:
        if connected:
            self.gossip.peer_connected(peer_id)
            self._due = True
        else:
            self.leaders.forget_broker(peer_id)
            self.faults.peers_stopping.discard(peer_id)  # back, it says afresh

    def on_store_damaged(self, group_id: str) -> None:
        """A store failed its checksum (any thread): the leaders elsewhere stop handing this replica its preferred
        leadership once they hear of it."""
        self.faults.on_store_damaged(group_id)
        self._due = True

    def on_store_rebuilt(self, group_id: str) -> None:
        self.faults.on_store_rebuilt(group_id)
        self._due = True

    def on_control(self, peer_id: int, message) -> None:
        """A peer's gossip message: its disk state, its damaged stores, whether it is stopping and the groups it
        leads."""
        if not isinstance(message, dict):
            return
        if message.get("disk_full"):
            self.faults.peers_disk_full.add(peer_id)
        else:
            self.faults.peers_disk_full.discard(peer_id)
        if message.get("stopping"):
            self.faults.peers_stopping.add(peer_id)
        else:
            self.faults.peers_stopping.discard(peer_id)
        damaged = message.get("damaged", ())
        self.faults.peers_damaged[peer_id] = {str(g) for g in damaged} if isinstance(damaged, list) else set()
        try:
            led = [(str(g), int(term), [int(b) for b in isr]) for g, term, isr in message.get("leaders", ())]
            gone = [str(g) for g in message.get("gone", ())]
        except (TypeError, ValueError):
            return
        self.leaders.apply_gossip(peer_id, led, gone, full=bool(message.get("full", True)))

    # ------------------------------------------------------------------ rounds
    def round_if_due(self) -> None:
        if self._due:
            self.round()

    def round(self) -> None:
        updates = self._led_updates()
        extra = {"disk_full": self.faults.disk.full, "damaged": self.faults.stats()["damaged_stores"],
                 "stopping": self.stopping.is_set()}
        for peer, message in self.gossip.round(updates, self.hub.connected_peers(), extra).items():
            self.hub.send(peer, CONTROL_CHANNEL, message)
        self._due = False

    def _led_updates(self) -> dict[str, tuple | None]:
        """(term, in-sync replicas) of the groups led here whose entry may have changed since the last round, None
        for those no longer led here (LeaderGossip.round). Every awake leader is looked at; a quiesced group's entry
        changes only when it quiesces or wakes (Quiescence.take_led_changes) or the set of live brokers changes, so
        idle groups, and groups that did not change while thousands of others did, cost a round nothing."""
        quiescence = self.loop.quiescence
        live = frozenset(quiescence.live_peers())
        changed = quiescence.take_led_changes()
        if live != self._live:
            self._live = live
            changed |= quiescence.led.keys() | self._led_quiesced.keys()
        updates: dict[str, tuple | None] = {}
        for group_id in changed:
            group = self.loop.groups.get(group_id) if group_id in quiescence.led else None
            if group is None:
                self._led_quiesced.pop(group_id, None)
                updates[group_id] = None
            else:
                updates[group_id] = self._led_quiesced[group_id] = (group.term, group.in_sync_replicas(self.node_id))
        led_awake = set()
        for group in self.loop.awake.values():
            if group.is_leader:
                led_awake.add(group.group_id)
                updates[group.group_id] = (group.term, group.in_sync_replicas(self.node_id))
        for group_id in self._led_awake - led_awake:  # awake and led at the last round, not now
            if group_id not in updates:
                updates[group_id] = self._led_quiesced.get(group_id)
        self._led_awake = led_awake
        return updates
