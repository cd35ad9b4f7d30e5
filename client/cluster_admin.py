"""Cluster membership and data movement from the SDK: Admin's membership calls (proto/membership.proto).

`metadata_members` reads the metadata group's voters and learners (any broker answers). `reassign_partition`
and `decommission_broker` are recorded by the controller and carried out by the cluster; with `wait=True` they
poll until done, handing each progress report to `progress`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from raftbus.client.errors import InvalidReplicas, RequestTimedOut
from raftbus.client.wire import membership_pb2 as mpb
from raftbus.client.wire import membership_pb2_grpc as mpb_grpc


@dataclass(frozen=True, slots=True)
class MetadataMembers:
    """The metadata group's configuration: voters elect the controller and commit; learners only receive."""

    voters: tuple[int, ...]
    learners: tuple[int, ...]
    config_index: int
    controller_id: int | None
    answering_broker_id: int

    def to_dict(self) -> dict:
        return {**asdict(self), "voters": list(self.voters), "learners": list(self.learners)}


@dataclass(frozen=True, slots=True)
class Reassignment:
    """One partition's placement, where it is going (empty once done), its group's members and learner lag."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    target: tuple[int, ...]
    voters: tuple[int, ...]
    learners: tuple[int, ...]
    lag_entries: int
    done: bool

    @classmethod
    def from_proto(cls, info: mpb.ReassignmentInfo) -> "Reassignment":
        return cls(info.topic, info.partition, tuple(info.replicas), tuple(info.target), tuple(info.voters),
                   tuple(info.learners), info.lag_entries, info.done)

    def to_dict(self) -> dict:
        return {name: list(v) if isinstance(v, tuple) else v for name, v in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class Decommission:
    broker_id: int
    replicas_left: int
    reassignments_running: int
    metadata_voter: bool
    done: bool

    @classmethod
    def from_proto(cls, info: mpb.DecommissionInfo) -> "Decommission":
        return cls(info.broker_id, info.replicas_left, info.reassignments_running, info.metadata_voter, info.done)

    def to_dict(self) -> dict:
        return asdict(self)


def check_replicas(replicas) -> list[int]:
    """The replica list as ints; InvalidReplicas when empty or repeating a broker (checked again by the broker)."""
    ids = [int(r) for r in replicas]
    if not ids:
        raise InvalidReplicas("a partition needs at least one replica (a replication factor of 0 is refused)")
    if len(set(ids)) != len(ids):
        raise InvalidReplicas(f"replica list {ids} names a broker twice")
    return ids


class MembershipCalls:
    """Mixed into Admin: needs `router`, `request_timeout_s`, `_sleep`, `_clock`, `topic_ready_poll_s`."""

    def _membership(self, conn):
        return mpb_grpc.MembershipStub(conn.channel)

    def metadata_members(self) -> MetadataMembers:
        response = self.router.call_any(lambda conn: self._membership(conn).MetadataMembers(
            mpb.MetadataMembersRequest(), timeout=self.request_timeout_s))
        return MetadataMembers(tuple(response.voters), tuple(response.learners), response.config_index,
                               response.controller_id or None, response.answering_broker_id)

    def reassign_partition(self, topic: str, partition: int, replicas, *, throttle_bytes_per_s: int = 0,
                           wait: bool = False, timeout_s: float = 600.0,
                           progress: Callable[[Reassignment], None] | None = None) -> Reassignment:
        """Move a partition's replicas to `replicas` (the first becomes the preferred leader)."""
        request = mpb.ReassignPartitionRequest(topic=topic, partition=partition, replicas=check_replicas(replicas),
                                               throttle_bytes_per_s=throttle_bytes_per_s)
        started = Reassignment.from_proto(self.router.call_controller(
            lambda conn: self._membership(conn).ReassignPartition(request, timeout=self.request_timeout_s)))
        if not wait:
            return started
        wanted = set(request.replicas)

        def describe() -> Reassignment:
            # Answered by the partition's leader from its metadata replica, which may not hold the target yet:
            # done only once the recorded placement is the one asked for.
            state = self.describe_reassignment(topic, partition)
            return state if set(state.replicas) == wanted else replace(state, done=False)
        return self._wait_for(describe, timeout_s, progress, f"partition {topic}/{partition} still moving")

    def describe_reassignment(self, topic: str, partition: int) -> Reassignment:
        request = mpb.DescribeReassignmentRequest(topic=topic, partition=partition)
        return Reassignment.from_proto(self.router.call_partition(
            topic, partition, lambda conn: self._membership(conn).DescribeReassignment(
                request, timeout=self.request_timeout_s)))

    def decommission_broker(self, broker_id: int, *, wait: bool = False, timeout_s: float = 1800.0,
                            progress: Callable[[Decommission], None] | None = None) -> Decommission:
        """Move every replica off a broker, hand its leaderships over and take it out of the metadata voters."""
        request = mpb.DecommissionBrokerRequest(broker_id=broker_id)
        started = Decommission.from_proto(self.router.call_controller(
            lambda conn: self._membership(conn).DecommissionBroker(request, timeout=self.request_timeout_s)))
        if not wait:
            return started
        return self._wait_for(lambda: self.describe_decommission(broker_id), timeout_s, progress,
                              f"broker {broker_id} still holds replicas")

    def describe_decommission(self, broker_id: int) -> Decommission:
        request = mpb.DescribeDecommissionRequest(broker_id=broker_id)
        return Decommission.from_proto(self.router.call_controller(
            lambda conn: self._membership(conn).DescribeDecommission(request, timeout=self.request_timeout_s)))

    def _wait_for(self, describe, timeout_s: float, progress, what: str):
        deadline = self._clock() + timeout_s
        while True:
            state = describe()
            if progress is not None:
                progress(state)
            if state.done:
                return state
            if self._clock() >= deadline:
                raise RequestTimedOut(f"{what} after {timeout_s} s: {state.to_dict()}")
            self._sleep(self.topic_ready_poll_s)
