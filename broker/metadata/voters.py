"""The metadata group's voters: brokers join as learners, are promoted once caught up, and leave one at a time.

The voter set is the metadata group's own configuration (configuration entries in its log, raft/configuration.py),
seeded from `peers` when the cluster is first bootstrapped and never again from a broker's local settings. The
brokers registry (metadata state) holds each broker's addresses, from which every broker's Raft transport learns
whom to accept and dial.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from raftbus.client import errors

from raftbus.broker.metadata import reassignment_commands
from raftbus.broker.context import BrokerContext, wait_result
from raftbus.broker.metadata.settings import MembershipSettings
from raftbus.broker.section import parse_address

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
    """Joins and metadata voters (controller). A join adds the broker as a learner only; the controller dials its
    Raft address, and promotes it once it is connected over the Raft port (its handshake proved the cluster secret
    and its node id), has registered itself, acknowledges entries and lacks at most
    membership_promote_lag_entries_max committed ones, while the voters stay within metadata_voters_max. A joined
    broker not caught up within membership_join_catch_up_timeout_ms is removed again: a join naming an address
    where no broker of the cluster answers never changes the voters."""

    def __init__(self, context: BrokerContext, settings: MembershipSettings, raft_peers=None,
                 clock=time.monotonic):
        self.context = context
        self.settings = settings
        self._raft_peers = raft_peers  # RaftPeers (expect/forget); None without a Raft transport
        self._clock = clock
        self._joining: dict[int, tuple[str, str, float]] = {}  # broker id -> (address, raft address, joined at)
        self._joining_lock = threading.Lock()  # joins come on gRPC threads, promotion runs on the loop thread
        self._learner_since: dict[int, float] = {}  # metadata learners, since when this controller has seen them
        self._proved: set[int] = set()  # learners seen caught up by this controller

    def members(self) -> MembersView:
        return members_view(self.context)

    def join(self, broker_id: int, address: str, raft_address: str, metrics_url: str = ""):
        """Add a broker to the metadata group as a learner (controller only; the same join again is answered
        alike). BrokerIdInUse when another broker still holds that id at other addresses."""
        if broker_id < 1:
            raise errors.InvalidArgument("broker_id must be >= 1")
        if not address or not raft_address:
            raise errors.InvalidArgument("a joining broker names its client and Raft addresses")
        parse_address(address), parse_address(raft_address)  # noqa: B018 - InvalidArgument when not host:port
        self.context.require_controller()
        self._check_id_free(broker_id, address, raft_address)
        group = self.context.metadata_group
        if broker_id not in group.membership.members:
            now = self._clock()
            with self._joining_lock:
                self._joining[broker_id] = (address, raft_address, now)
                self._learner_since[broker_id] = now  # the catch-up bound runs from the join
            if self._raft_peers is not None:
                self._raft_peers.expect(broker_id, raft_address)
            change_membership(self.context, group, lambda m: m.add_learner(broker_id), f"join {broker_id}",
                              self.settings.membership_change_timeout_ms)
            log.info("broker joining as a metadata learner", extra={"broker_id": broker_id, "address": address,
                                                                    "raft_address": raft_address})
        brokers = {b.broker_id: b.raft_address for b in self.context.metadata_sm.brokers().values()}
        return brokers, members_view(self.context)

    def _check_id_free(self, broker_id: int, address: str, raft_address: str) -> None:
        """A registered or joining broker of this id at other addresses must be gone: not a metadata member and
        not connected (a joining one: removed, or timed out)."""
        known = self.context.metadata_sm.brokers().get(broker_id)
        with self._joining_lock:
            joining = self._joining.get(broker_id)
        held = [(known.address, known.raft_address)] if known is not None else []
        if joining is not None and broker_id in self.context.metadata_group.membership.members:
            held.append(joining[:2])
        if not held or all(h == (address, raft_address) for h in held):
            return
        present = (broker_id in self.context.metadata_group.membership.members
                   or broker_id in self.context.alive_brokers())
        if present:
            where = ", ".join(f"{a} (Raft {r})" for a, r in held)
            raise errors.BrokerIdInUse(f"broker {broker_id} is in the cluster at {where}; stop it and retire it "
                                       "(raftbus brokers decommission) before another broker joins with its id")

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
        """Controller, loop thread: promote one caught-up learner while the voters are below metadata_voters_max,
        or remove one joined learner that did not catch up within membership_join_catch_up_timeout_ms."""
        group = self.context.metadata_group
        if not group.is_leader:
            with self._joining_lock:
                self._learner_since.clear()
            self._proved.clear()
            return
        learners = group.membership.learners
        now = self._clock()
        with self._joining_lock:
            self._learner_since = {b: self._learner_since.get(b, now) for b in learners}
            expired = [b for b, joined in self._joining.items()
                       if b not in learners and _join_expired(joined, now, self.settings)]
        self._proved &= learners
        for gone in expired:
            self._forget(gone)
        if not learners:
            return
        s = self.settings
        ready = group.caught_up_learners(s.membership_promote_lag_entries_max)
        self._proved |= ready
        brokers = self.context.metadata_sm.brokers()
        for learner in sorted(learners):
            if learner in brokers and not brokers[learner].placeable:
                continue  # demoted while being decommissioned: it stays a learner until it is stopped
            if learner in ready and learner in brokers:
                if len(group.membership.voters) >= s.metadata_voters_max:
                    continue  # a metadata observer: it receives the log and serves partitions, without a vote
                self._propose(group, lambda m, learner=learner: m.promote(learner), f"promote {learner}")
                return
            waited_ms = (now - self._learner_since[learner]) * 1000
            if learner not in self._proved and waited_ms > s.membership_join_catch_up_timeout_ms:
                log.warning("broker %s joined but did not connect over the Raft port and catch up within "
                            "membership_join_catch_up_timeout_ms=%s; removing it from the metadata group", learner,
                            s.membership_join_catch_up_timeout_ms)
                self._propose(group, lambda m, learner=learner: m.remove(learner), f"remove {learner}")
                return  # once it is out, the next rounds stop dialing it (above)

    def _propose(self, group, step, what: str) -> None:
        future = group.propose_membership(step)
        future.add_done_callback(lambda f: _log_outcome(f, what))

    def _forget(self, broker_id: int) -> None:
        with self._joining_lock:
            self._joining.pop(broker_id, None)
            self._learner_since.pop(broker_id, None)
        if self._raft_peers is not None:
            self._raft_peers.forget(broker_id)


def _join_expired(joining: tuple, now: float, settings: MembershipSettings) -> bool:
    """Whether a join whose broker is no longer a learner (promoted, or removed) may be forgotten: after one
    catch-up bound, so a join answered just before its learner was installed here is not dropped."""
    return (now - joining[2]) * 1000 > settings.membership_join_catch_up_timeout_ms


def _log_outcome(future, what: str) -> None:
    error = future.exception()
    if error is None:
        log.info("metadata membership changed: %s", what, extra={"members": future.result().to_dict()})
    elif not isinstance(error, errors.MembershipChangeInProgress):
        log.warning("metadata membership change %s failed: %s", what, error)
