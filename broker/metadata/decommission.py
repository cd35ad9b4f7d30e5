"""Emptying a broker before its machine is retired: its replicas move elsewhere, then it leaves the metadata voters.

`DecommissionBroker` marks the broker `decommissioning` (it hands every leadership away, like a drained broker, and
no new replica is placed on it). The controller then, every `membership_check_interval_ms`, records a reassignment
for each partition still on it (the replacement is the least-loaded placeable broker not already holding the
partition; at most `reassignments_running_max` run at once) and, once none is left, removes it from the metadata
group's voters (it stays a learner, receiving the metadata log, until it is stopped; then it is removed from
the configuration altogether). Everything it needs is in the metadata group, so a new controller carries on.
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

from raftbus.client import errors

from raftbus.broker import commands, model
from raftbus.broker.metadata import reassignment_commands
from raftbus.broker.context import BrokerContext, wait_result
from raftbus.broker.metadata.settings import MembershipSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecommissionView:
    broker_id: int
    replicas_left: int
    reassignments_running: int
    metadata_voter: bool

    @property
    def done(self) -> bool:
        return self.replicas_left == 0 and not self.metadata_voter


def replica_load(topics) -> Counter:
    """Partition replicas each broker holds or is receiving."""
    return Counter(b for t in topics for p in t.partitions for b in p.hosts)


def replacement(placement: model.PartitionPlacement, leaving: int, candidates, load: Counter) -> int | None:
    """The least-loaded candidate (then the lowest id) not already holding the partition."""
    free = [b for b in candidates if b != leaving and b not in placement.hosts]
    return min(free, key=lambda b: (load[b], b)) if free else None


def moves(topics, leaving: int, candidates) -> list[tuple[str, int, list[int]]]:
    """(topic, partition, new replicas) for every partition still placed on `leaving` and not moving yet."""
    load = replica_load(topics)
    planned = []
    for topic in topics:
        for placement in topic.partitions:
            if leaving not in placement.replicas or placement.target:
                continue
            new = replacement(placement, leaving, candidates, load)
            if new is None:
                raise errors.InvalidReplicas(f"no broker can take {topic.name}/{placement.partition} off broker "
                                             f"{leaving}: every placeable broker already holds it")
            load[new] += 1
            planned.append((topic.name, placement.partition, [b for b in placement.replicas if b != leaving] + [new]))
    return planned


class Decommissions:
    def __init__(self, context: BrokerContext, settings: MembershipSettings):
        self.context = context
        self.settings = settings
        self._in_flight: dict[tuple[str, int], object] = {}
        self._removal = None

    def start(self, broker_id: int) -> DecommissionView:
        """Mark `broker_id` decommissioning (controller only); its replicas then move off it."""
        self.context.require_controller()
        brokers = self.context.metadata_sm.brokers()
        if broker_id not in brokers:
            raise errors.UnknownBroker(f"broker {broker_id} is not registered")
        candidates = [b.broker_id for b in brokers.values() if b.placeable and b.broker_id != broker_id]
        moves(self.context.metadata_sm.topics().values(), broker_id, candidates)  # refuses when impossible
        if len(self.context.metadata_group.membership.voters - {broker_id}) < 1:
            raise errors.InvalidReplicas(f"broker {broker_id} is the metadata group's last voter")
        command = commands.encode_set_broker_state(broker_id=broker_id, state=model.DECOMMISSIONING,
                                                   now_ms=self.context.clock.now_ms())
        wait_result(self.context.metadata_group.submit(command),
                    self.settings.membership_change_timeout_ms / 1000)
        return self.describe(broker_id)

    def describe(self, broker_id: int) -> DecommissionView:
        if broker_id not in self.context.metadata_sm.brokers():
            raise errors.UnknownBroker(f"broker {broker_id} is not registered")
        placements = [p for t in self.context.metadata_sm.topics().values() for p in t.partitions]
        left = [p for p in placements if broker_id in p.hosts]
        return DecommissionView(broker_id, len(left), sum(1 for p in left if p.target),
                                broker_id in self.context.metadata_group.membership.voters)

    def advance(self) -> None:
        """Controller, loop thread: record the next reassignments, then the voter removal, of each broker being
        decommissioned."""
        if not self.context.metadata_group.is_leader:
            return
        brokers = self.context.metadata_sm.brokers()
        for broker in brokers.values():
            if broker.state == model.DECOMMISSIONING:
                try:
                    self._advance_one(broker.broker_id, brokers)
                except errors.RaftbusError as exc:
                    log.warning("decommissioning broker %s: %s", broker.broker_id, exc)

    def _advance_one(self, broker_id: int, brokers) -> None:
        topics = list(self.context.metadata_sm.topics().values())
        candidates = [b.broker_id for b in brokers.values() if b.placeable and b.broker_id != broker_id]
        s = self.settings
        room = s.reassignments_running_max - reassignment_commands.running(self.context.metadata_sm.topics())
        for topic, partition, replicas in moves(topics, broker_id, candidates)[:max(0, room)]:
            pending = self._in_flight.get((topic, partition))
            if pending is not None and not pending.done():
                continue
            self._in_flight[(topic, partition)] = self.context.metadata_group.submit(reassignment_commands.encode_reassign(
                name=topic, partition=partition, replicas=replicas, throttle_bytes_per_s=0,
                reassignments_running_max=s.reassignments_running_max, now_ms=self.context.clock.now_ms()))
        view = self.describe(broker_id)
        if view.replicas_left or (self._removal is not None and not self._removal.done()):
            return
        membership = self.context.metadata_group.membership
        if broker_id in membership.voters:
            # Demoted, not removed: as a learner it still receives the metadata log (a removed member never
            # learns of its removal and would serve frozen metadata until stopped).
            self._removal = self.context.metadata_group.propose_membership(lambda m: m.demote(broker_id))
        elif broker_id in membership.learners and broker_id not in self.context.alive_brokers():
            self._removal = self.context.metadata_group.propose_membership(lambda m: m.remove(broker_id))
