"""The metadata group's voters: brokers join as learners, are promoted once caught up, and leave one at a time.

The voter set is the metadata group's own configuration (configuration entries in its log, raft/membership.py),
seeded from `peers` when the cluster is first bootstrapped and never again from a broker's local settings. The
brokers registry (metadata state) holds each broker's addresses, from which every broker's Raft transport learns
whom to accept and dial.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from raftbus.client import errors

from raftbus.broker.context import BrokerContext, wait_result

log = logging.getLogger(__name__)


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


def change_membership(context: BrokerContext, group, step, what: str):
    """Propose `step` on `group` from the loop thread and wait for it (retrying while another change is in flight,
    up to membership_change_timeout_ms); returns the installed configuration."""
    deadline = time.monotonic() + context.settings.membership_change_timeout_ms / 1000
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
    def __init__(self, context: BrokerContext, register_broker):
        self.context = context
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
            change_membership(self.context, group, lambda m: m.add_learner(broker_id), f"join {broker_id}")
        brokers = {b.broker_id: b.raft_address for b in self.context.metadata_sm.brokers().values()}
        return brokers, members_view(self.context)

    def promote_caught_up(self) -> None:
        """Controller, loop thread: propose promoting one metadata learner that has caught up."""
        group = self.context.metadata_group
        if not group.is_leader or not group.membership.learners:
            return
        lag = group.learner_progress()
        bound = self.context.settings.membership_promote_lag_entries_max
        for learner in sorted(group.membership.learners):
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
