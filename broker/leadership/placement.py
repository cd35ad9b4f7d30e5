"""Where the groups this broker leads should be led: by their preferred replica (the first of its placement)
when it is up, has room and an undamaged store; by another broker while this one drains; by a follower once this
broker stops. A broker that said it is stopping (leader gossip) is handed none of them."""
from __future__ import annotations

import time

from raftbus.broker.context import BrokerContext
from raftbus.broker.leadership.settings import LeadershipSettings

HAND_OFF_RETRY_S = 0.1


class LeaderPlacement:
    def __init__(self, context: BrokerContext, settings: LeadershipSettings, *, hub, faults):
        self.context = context
        self.settings = settings
        self.hub = hub
        self.faults = faults  # raft/faults.py: this broker's disk and what its peers reported of theirs

    def register(self, registry) -> None:
        registry.every("preferred leaders", self.settings.preferred_leader_check_interval_ms, self.prefer_leaders)
        registry.every("drain", self.settings.drain_check_interval_ms, self.drain)

    def draining_brokers(self) -> set[int]:
        return {b.broker_id for b in self.context.metadata_sm.brokers().values() if b.draining}

    def peers_able_to_lead(self) -> set[int]:
        """The connected peers that did not say they are stopping."""
        return self.hub.connected_peers() - self.faults.peers_stopping

    def prefer_leaders(self) -> None:
        """Leaders move to their preferred replica, unless it is draining or stopping or its disk is full."""
        connected = self.peers_able_to_lead()
        draining = self.draining_brokers()
        if self.context.node_id in draining or self.faults.disk.full:
            return
        for replica in list(self.context.partitions.values()):
            group = replica.group
            if group.preferred_leader in self.faults.peers_disk_full or \
                    group.group_id in self.faults.peers_damaged.get(group.preferred_leader, ()):
                continue
            if group.is_leader and group.preferred_leader in connected and group.preferred_leader not in draining:
                group.maybe_transfer_to_preferred()

    def drain(self) -> None:
        """A draining broker hands every group it leads to a connected replica that is neither draining nor
        stopping (the metadata group included); a denied hand-over (target behind) is tried again at the next
        check."""
        draining = self.draining_brokers()
        if self.context.node_id not in draining:
            return
        connected = self.peers_able_to_lead()
        groups = [self.context.metadata_group, *(r.group for r in list(self.context.partitions.values()))]
        for group in groups:
            if not group.is_leader:
                continue
            targets = sorted(p for p in group.membership.voters if p in connected and p not in draining)
            if targets:
                group.hand_over(targets[0])

    def hand_off(self, loop, timeout_s: float, *, tell) -> None:
        """This broker is stopping: `tell` its peers so (a gossip round), then ask the most caught-up voter of
        each group led here that is connected and not stopping itself to take it over, and wait (bounded by
        `timeout_s`) until no group led here has such a voter. A group whose other voters are all gone or
        stopping stays as it is, so a whole cluster stopping at once does not wait out the bound."""
        if not loop.running:
            return
        deadline = time.monotonic() + timeout_s

        def transfer() -> int:
            able = self.peers_able_to_lead()
            handed = 0
            for group in list(loop.groups.values()):
                if not group.is_leader:
                    continue
                targets = [p for p in group.membership.voters if p in able and p != self.context.node_id]
                if targets:
                    group.hand_over(group.most_caught_up(targets))
                    handed += 1
            return handed

        try:
            loop.call(tell, timeout_s=1.0)
        except Exception:  # noqa: BLE001 - the peers hear it at the next round; the hand-off goes on
            pass
        while time.monotonic() < deadline:
            try:
                if loop.call(transfer, timeout_s=1.0) == 0:
                    return
            except Exception:
                return
            time.sleep(HAND_OFF_RETRY_S)
