"""Where the groups this broker leads should be led: by their preferred replica (the first of its placement)
when it is up, has room and an undamaged store; by another broker while this one drains; by a follower once this
broker stops."""
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

    def prefer_leaders(self) -> None:
        """Leaders move to their preferred replica, unless it is draining or its disk is full."""
        connected = self.hub.connected_peers()
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
        """A draining broker hands every group it leads to a connected replica that is not draining (the metadata
        group included); a denied hand-over (target behind) is tried again at the next check."""
        draining = self.draining_brokers()
        if self.context.node_id not in draining:
            return
        connected = self.hub.connected_peers()
        groups = [self.context.metadata_group, *(r.group for r in list(self.context.partitions.values()))]
        for group in groups:
            if not group.is_leader:
                continue
            targets = sorted(p for p in group.membership.voters if p in connected and p not in draining)
            if targets:
                group.hand_over(targets[0])


def hand_off_leaderships(loop, timeout_s: float) -> None:
    """Ask a caught-up follower to take over each group led here, and wait (bounded) for it to do so (a broker
    stopping)."""
    if not loop.running:
        return
    deadline = time.monotonic() + timeout_s

    def transfer():
        led = [g for g in loop.groups.values() if g.is_leader and g.transport.nodes]
        for group in led:
            group.hand_over()
        return len(led)

    while time.monotonic() < deadline:
        try:
            if loop.call(transfer, timeout_s=1.0) == 0:
                return
        except Exception:
            return
        time.sleep(HAND_OFF_RETRY_S)
