"""Carries out partition reassignments on the brokers that lead the partitions (loop thread).

Every `membership_check_interval_ms` each broker looks at the partitions it leads whose placement has a target
(recorded by the controller, metadata/reassignment_commands.py) and takes the next step (metadata/reassignment_steps.py): one membership
change at a time through the partition's own log, with the catch-up throttle set on the group while learners
catch up. The leader of a partition holds what the decision needs (its followers' match indexes); if it fails, the
next leader goes on from the configuration in the group's log and the target in the metadata.
"""
from __future__ import annotations

import logging

from raftbus.client import errors

from raftbus.broker.metadata import reassignment_commands
from raftbus.broker.metadata.reassignment_steps import ADD_LEARNER, COMPLETE, HAND_OVER, PROMOTE, REMOVE, next_step
from raftbus.broker.context import BrokerContext, partition_group_id
from raftbus.broker.metadata.settings import MembershipSettings

log = logging.getLogger(__name__)

_STEPS = {
    ADD_LEARNER: lambda broker_id: lambda m: m.add_learner(broker_id),
    PROMOTE: lambda broker_id: lambda m: m.promote(broker_id),
    REMOVE: lambda broker_id: lambda m: m.remove(broker_id),
}


class Reassigner:
    def __init__(self, context: BrokerContext, settings: MembershipSettings):
        self.context = context
        self.settings = settings
        self._in_flight: dict[str, object] = {}  # group id -> future of the step proposed last
        self._throttled: set[str] = set()  # groups whose catch-up throttle this broker set
        self._moving: tuple = (None, [])  # (the metadata's topics, [(group id, topic, placement) with a target])

    def advance(self) -> None:
        """Take the next step of every reassignment whose partition this broker leads, and lift the throttle of
        groups whose reassignment ended (only partitions with a target are looked at)."""
        moving = set()
        for group_id, topic, placement in self._moving_partitions():
            replica = self.context.partitions.get(group_id)
            if replica is None:
                continue
            moving.add(group_id)
            if not replica.group.is_leader:
                continue
            try:
                self._advance_one(topic, placement, replica.group)
            except Exception:
                log.exception("reassignment step failed", extra={"group": group_id})
        for group_id in self._throttled - moving:
            self._throttled.discard(group_id)
            self._in_flight.pop(group_id, None)
            replica = self.context.partitions.get(group_id)
            if replica is not None and replica.group.transport.throttle is not None:
                replica.group.set_catch_up_throttle(0)

    def _moving_partitions(self) -> list:
        topics = self.context.metadata_sm.topics()
        if self._moving[0] is not topics:
            self._moving = (topics, [(partition_group_id(t.topic_id, p.partition), t, p)
                                     for t in topics.values() for p in t.partitions if p.target])
        return self._moving[1]

    def _advance_one(self, topic, placement, group) -> None:
        pending = self._in_flight.get(group.group_id)
        if pending is not None and not pending.done():
            return
        throttle = placement.throttle_bytes_per_s or self.settings.reassign_throttle_bytes_per_s
        if (group.transport.throttle.bytes_per_s if group.transport.throttle else 0) != throttle:
            group.set_catch_up_throttle(throttle)
            self._throttled.add(group.group_id)
        membership = group.membership
        step = next_step(membership.voters, membership.learners, placement.target, group.learner_progress(),
                         self.context.node_id, self.settings.membership_promote_lag_entries_max)
        if step.action in _STEPS:
            future = group.propose_membership(_STEPS[step.action](step.broker_id))
        elif step.action == HAND_OVER:
            group.hand_over(step.broker_id)
            return
        elif step.action == COMPLETE:
            future = self.context.metadata_group.submit(reassignment_commands.encode_complete(
                name=topic.name, topic_id=topic.topic_id, partition=placement.partition,
                replicas=list(placement.target), now_ms=self.context.clock.now_ms()))
        else:
            return
        self._in_flight[group.group_id] = future
        future.add_done_callback(lambda f: _log_step(group.group_id, step, f))


def _log_step(group_id: str, step, future) -> None:
    error = future.exception()
    if error is None and not isinstance(future.result(), errors.RaftbusError):
        log.info("reassignment step done", extra={"group": group_id, "step": step.action, "broker": step.broker_id})
    elif not isinstance(error, errors.MembershipChangeInProgress):
        log.info("reassignment step refused, retried at the next check",
                 extra={"group": group_id, "step": step.action, "error": str(error or future.result())})
