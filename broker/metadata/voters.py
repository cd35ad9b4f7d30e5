"""The metadata group's voters: brokers join as learners, are promoted once caught up, and leave one at a time.

The voter set is the metadata group's own configuration (configuration entries in its log, raft/configuration.py),
seeded from `peers` when the cluster is first bootstrapped and never again from a broker's local settings. The
brokers registry (metadata state) holds each broker's addresses, from which every broker's Raft transport learns
whom to accept and dial.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from raftbus.client import errors

from raftbus.broker.metadata import reassignment_commands
from raftbus.broker.context import BrokerContext, wait_result
from raftbus.broker.metadata.settings import MembershipSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReassignmentView:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    target: tuple[int, ...]
    voters: tuple[int, ...]
    learners: tuple[int, ...]
    lag_entries: int  # what the learners still lack; -1 when this broker does not lead the partition

    @property
    def done(self) -> bool:
        return not self.target


@dataclass(frozen=True)
class MembersView:
    voters: tuple[int, ...]
    learners: tuple[int, ...]
    config_index: int
    controller_id: int | None


def members_view(context: BrokerContext) -> MembersView:
    membership = context.metadata_group.membership
    return MembersView(tuple(sorted(membership.voters)), tuple(sorted(membership.learners)), membership.index,
                       context.controller_id())


def change_membership(context: BrokerContext, group, step, what: str, timeout_ms: int):
    """Propose `step` on `group` from the loop thread and wait for it (retrying while another change is in flight,
    up to `timeout_ms`, membership_change_timeout_ms); returns the installed configuration."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        future = context.run_on_loop(lambda: group.propose_membership(step))
        try:
            return wait_result(future, max(0.1, deadline - time.monotonic()))
        except errors.MembershipChangeInProgress:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)
        except errors.RaftbusError as exc:
            log.info("membership change refused", extra={"group": group.group_id, "what": what,
                                                          "error": exc.code})
            raise


class MembershipService:
    def __init__(self, context: BrokerContext, settings: MembershipSettings, register_broker):
        self.context = context
        self.settings = settings
        self._register_broker = register_broker  # AdminService.register_broker

    def members(self) -> MembersView:
        return members_view(self.context)

    def join(self, broker_id: int, address: str, raft_address: str, metrics_url: str = ""):
        """Register a broker and add it to the metadata group as a learner (controller only; idempotent)."""
        if broker_id < 1:
            raise errors.InvalidArgument("broker_id must be >= 1")
        if not address or not raft_address:
            raise errors.InvalidArgument("a joining broker names its client and Raft addresses")
        self.context.require_controller()
        known = self.context.metadata_sm.brokers().get(broker_id)
        if known is not None and known.raft_address != raft_address:
            member = broker_id in self.context.metadata_group.membership.members
            if member:
                raise errors.InvalidArgument(f"broker {broker_id} is already a member at {known.raft_address}")
        self._register_broker(broker_id, address, raft_address, metrics_url)
        group = self.context.metadata_group
        if broker_id not in group.membership.members:
            change_membership(self.context, group, lambda m: m.add_learner(broker_id), f"join {broker_id}",
                              self.settings.membership_change_timeout_ms)
        brokers = {b.broker_id: b.raft_address for b in self.context.metadata_sm.brokers().values()}
        return brokers, members_view(self.context)

    # ------------------------------------------------------------------ partition reassignment
    def reassign(self, topic: str, partition: int, replicas, throttle_bytes_per_s: int) -> ReassignmentView:
        """Record that a partition moves to `replicas` (controller only); its leader carries it out."""
        s = self.settings
        if throttle_bytes_per_s < 0:
            raise errors.InvalidArgument("throttle_bytes_per_s must be >= 0 (0 = reassign_throttle_bytes_per_s)")
        self.context.require_controller()
        reassignment_commands.check_replicas(list(replicas), self.context.metadata_sm.brokers())
        command = reassignment_commands.encode_reassign(
            name=topic, partition=partition, replicas=list(replicas), throttle_bytes_per_s=throttle_bytes_per_s,
            reassignments_running_max=s.reassignments_running_max, now_ms=self.context.clock.now_ms())
        wait_result(self.context.metadata_group.submit(command), s.membership_change_timeout_ms / 1000)
        return self.reassignment(topic, partition, leader_only=False)

    def reassignment(self, topic: str, partition: int, *, leader_only: bool = True) -> ReassignmentView:
        """A partition's placement, target and (on its leader) its group's members and learner lag."""
        described = self.context.topic(topic)
        if not 0 <= partition < len(described.partitions):
            raise errors.UnknownPartition(f"topic {topic!r} has no partition {partition}")
        placement = described.partitions[partition]
        voters, learners, lag = (), (), -1
        if leader_only or self.context.metadata_group.is_leader:
            try:
                replica = self.context.leader_replica(topic, partition)
            except errors.RaftbusError:
                if leader_only and placement.target:
                    raise
                replica = None
            if replica is not None:
                membership = replica.group.membership
                voters, learners = tuple(sorted(membership.voters)), tuple(sorted(membership.learners))
                progress = replica.group.learner_progress()
                lag = max((progress.get(b, 0) for b in membership.learners), default=0)
        return ReassignmentView(topic, partition, placement.replicas, placement.target, voters, learners, lag)

    def promote_caught_up(self) -> None:
        """Controller, loop thread: propose promoting one metadata learner that has caught up."""
        group = self.context.metadata_group
        if not group.is_leader or not group.membership.learners:
            return
        lag = group.learner_progress()
        bound = self.settings.membership_promote_lag_entries_max
        brokers = self.context.metadata_sm.brokers()
        for learner in sorted(group.membership.learners):
            if learner in brokers and not brokers[learner].placeable:
                continue  # demoted while being decommissioned: it stays a learner until it is stopped
            if lag.get(learner, bound + 1) <= bound:
                future = group.propose_membership(lambda m, learner=learner: m.promote(learner))
                future.add_done_callback(lambda f, learner=learner: _log_outcome(f, f"promote {learner}"))
                return


def _log_outcome(future, what: str) -> None:
    error = future.exception()
    if error is None:
        log.info("metadata membership changed: %s", what, extra={"members": future.result().to_dict()})
    elif not isinstance(error, errors.MembershipChangeInProgress):
        log.warning("metadata membership change %s failed: %s", what, error)
