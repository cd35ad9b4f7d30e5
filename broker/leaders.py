"""Who leads which group, as far as this broker knows.

Replicas know their own group's leader from Raft. For groups hosted elsewhere, every broker tells its peers
which groups it leads, so any broker can answer a client's metadata request with a leader for every partition.

The gossip costs nothing per idle group: every `leader_gossip_interval_ms` a broker sends each connected peer only
what changed since its last message (groups it leads now or with another term or in-sync set, groups it no
longer leads); a peer that connects, and every peer each `leader_gossip_full_interval_ms`, gets the whole list.
Working a round out costs only the groups the broker names as possibly changed (`LeaderGossip.round`).
A message, even an empty one, says the sender is alive: what a broker told about itself stands until it has been
silent for `stale_after_s` (or disconnects), however long ago each entry was sent.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class LeaderInfo:
    leader_id: int
    term: int
    isr: tuple[int, ...]


class LeaderTable:
    def __init__(self, stale_after_s: float = 10.0, clock=time.monotonic):
        self._entries: dict[str, LeaderInfo] = {}
        self._heard: dict[int, float] = {}  # broker → when its last gossip arrived
        self._lock = threading.Lock()
        self._clock = clock
        self.stale_after_s = stale_after_s

    def _learn(self, group_id: str, leader_id: int, term: int, isr) -> None:
        known = self._entries.get(group_id)
        if known is None or term >= known.term:
            self._entries[group_id] = LeaderInfo(leader_id, term, tuple(isr))

    def apply_gossip(self, broker_id: int, led: list, gone: list, full: bool) -> None:
        """One gossip message of `broker_id`: the groups it leads ((group, term, isr) each; all of them when
        `full`, else those that changed) and the groups it no longer leads."""
        with self._lock:
            self._heard[broker_id] = self._clock()
            if full:
                listed = {entry[0] for entry in led}
                gone = [g for g, info in self._entries.items() if info.leader_id == broker_id and g not in listed]
            for group_id in gone:
                info = self._entries.get(group_id)
                if info is not None and info.leader_id == broker_id:
                    del self._entries[group_id]
            for group_id, term, isr in led:
                self._learn(group_id, broker_id, term, isr)

    def forget_broker(self, broker_id: int) -> None:
        with self._lock:
            self._heard.pop(broker_id, None)
            for group_id in [g for g, info in self._entries.items() if info.leader_id == broker_id]:
                del self._entries[group_id]

    def forget_group(self, group_id: str) -> None:
        with self._lock:
            self._entries.pop(group_id, None)

    def get(self, group_id: str) -> LeaderInfo | None:
        with self._lock:
            info = self._entries.get(group_id)
            heard = self._heard.get(info.leader_id) if info is not None else None
        if heard is None or self._clock() - heard > self.stale_after_s:
            return None
        return info


class LeaderGossip:
    """The sending side: what this broker last told its peers about the groups it leads."""

    def __init__(self, full_every_rounds: int):
        self.full_every_rounds = max(1, full_every_rounds)
        self._told: dict[str, tuple] = {}  # group → (term, isr) as every connected peer knows it
        self._new_peers: set[int] = set()
        self._rounds = 0

    def peer_connected(self, peer_id: int) -> None:
        self._new_peers.add(peer_id)

    def messages(self, led: dict[str, tuple], peers, extra: dict) -> dict[int, dict]:
        """One round from the whole list: `led` maps each group led here to (term, isr); groups told before and
        missing from it are gone. Returns the message for each of `peers`."""
        updates: dict[str, tuple | None] = dict.fromkeys(self._told)
        updates.update(led)
        return self.round(updates, peers, extra)

    def round(self, updates: dict[str, tuple | None], peers, extra: dict) -> dict[int, dict]:
        """One round from what may have changed: `updates` maps a group to its (term, isr) now, or to None when it
        is no longer led here; a group not named stands as last told (so a round costs the groups named, not
        every group led here). Returns the message for each of `peers`."""
        self._rounds += 1
        full_round = self._rounds % self.full_every_rounds == 0
        told = self._told
        changed, gone = [], []
        for group_id, entry in updates.items():
            if entry is None:
                if told.pop(group_id, None) is not None:
                    gone.append(group_id)
            elif told.get(group_id) != entry:
                told[group_id] = entry
                changed.append([group_id, entry[0], entry[1]])
        full = None
        out = {}
        for peer in peers:
            if full_round or peer in self._new_peers:
                if full is None:
                    full = {**extra, "leaders": [[g, term, isr] for g, (term, isr) in told.items()], "full": True}
                out[peer] = full
            else:
                out[peer] = {**extra, "leaders": changed, "gone": gone, "full": False}
        self._new_peers.difference_update(peers)
        return out
