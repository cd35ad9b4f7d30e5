"""The Groups RPCs through a Router: membership calls to the controller, offsets to partition leaders.

Used by the Consumer and by Admin. Each call follows NOT_LEADER hints and retries what the router retries;
every other typed error goes back to the caller.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import NamedTuple

from raftbus.client.router import Connection, Router
from raftbus.client.wire import groups_pb2 as gpb
from raftbus.client.wire import groups_pb2_grpc as gpb_grpc


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class JoinAnswer:
    member_id: str
    generation: int
    session_timeout_ms: int
    rebalance_timeout_ms: int
    heartbeat_interval_ms: int


@dataclass(frozen=True, slots=True)
class Assignment:
    """A SyncGroup answer: what the member owns at `generation`, must give up, and waits for."""

    generation: int
    owned: frozenset[TopicPartition]
    revoking: frozenset[TopicPartition]
    pending: frozenset[TopicPartition]


def partitions_of(items) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(tp.topic, tp.partition) for tp in items)


def partitions_proto(tps) -> list[gpb.TopicPartition]:
    return [gpb.TopicPartition(topic=t, partition=p) for t, p in sorted(tps)]


class GroupCalls:
    """Thread-safe wrappers of the Groups service over a Router's pooled channels."""

    def __init__(self, router: Router):
        self.router = router
        self._stubs: dict[str, tuple[object, gpb_grpc.GroupsStub]] = {}
        self._lock = threading.Lock()
        self._registered: set[tuple[str, str]] = set()  # (group, topic) this object registered already

    def stub(self, conn: Connection) -> gpb_grpc.GroupsStub:
        """The Groups stub on `conn`'s channel (made once per channel)."""
        with self._lock:
            known = self._stubs.get(conn.address)
            if known is None or known[0] is not conn.channel:
                known = self._stubs[conn.address] = (conn.channel, gpb_grpc.GroupsStub(conn.channel))
            return known[1]

    @property
    def timeout_s(self) -> float:
        return self.router.request_timeout_s

    # ------------------------------------------------------------------ controller
    def join(self, group: str, member_id: str, client_id: str, topics, session_timeout_ms: int,
             rebalance_timeout_ms: int) -> JoinAnswer:
        request = gpb.JoinGroupRequest(group=group, member_id=member_id, client_id=client_id, topics=sorted(topics),
                                       session_timeout_ms=session_timeout_ms,
                                       rebalance_timeout_ms=rebalance_timeout_ms)
        r = self.router.call_controller(lambda conn: self.stub(conn).JoinGroup(request, timeout=self.timeout_s))
        return JoinAnswer(r.member_id, r.generation, r.session_timeout_ms, r.rebalance_timeout_ms,
                          r.heartbeat_interval_ms)

    def heartbeat_call(self, group: str, member_id: str, generation: int, max_wait_ms: int):
        """One Heartbeat to the controller as a cancellable gRPC future (no retries: the caller paces them)."""
        request = gpb.HeartbeatRequest(group=group, member_id=member_id, generation=generation,
                                       max_wait_ms=max_wait_ms)
        conn = self.router.connection(self.router.controller_address())
        return self.stub(conn).Heartbeat.future(request, timeout=self.timeout_s + max_wait_ms / 1000)

    def sync(self, group: str, member_id: str, generation: int, released=()) -> Assignment:
        request = gpb.SyncGroupRequest(group=group, member_id=member_id, generation=generation,
                                       released=partitions_proto(released))
        r = self.router.call_controller(lambda conn: self.stub(conn).SyncGroup(request, timeout=self.timeout_s))
        return Assignment(r.generation, partitions_of(r.owned), partitions_of(r.revoking), partitions_of(r.pending))

    def register(self, group: str, topics) -> gpb.GroupInfo:
        """The group, made to exist holding `topics` (created without members, or the topics added to an empty
        group), so that offsets set without a member are listed and described."""
        request = gpb.RegisterGroupRequest(group=group, topics=sorted(set(topics)))
        return self.router.call_controller(lambda conn: self.stub(conn).RegisterGroup(request, timeout=self.timeout_s))

    def leave(self, group: str, member_id: str) -> None:
        request = gpb.LeaveGroupRequest(group=group, member_id=member_id)
        self.router.call_controller(lambda conn: self.stub(conn).LeaveGroup(request, timeout=self.timeout_s))

    # ------------------------------------------------------------------ partition leaders
    def commit(self, group: str, member_id: str, generation: int, tp: TopicPartition, offset: int,
               metadata: str = "", reset: bool = False) -> int:
        request = gpb.CommitOffsetRequest(group=group, member_id=member_id, generation=generation, topic=tp[0],
                                          partition=tp[1], offset=offset, metadata=metadata, reset=reset)
        r = self.router.call_partition(tp[0], tp[1],
                                       lambda conn: self.stub(conn).CommitOffset(request, timeout=self.timeout_s))
        return r.offset

    def reset_offset(self, group: str, tp: TopicPartition, offset: int) -> int:
        """An operator's offset (backwards too; only while the group has no member). A group that does not exist is
        created first, holding the topic, as Kafka's tools create a group's offsets: it is then listed and
        described (state empty) with its offsets and lag."""
        if (group, tp[0]) not in self._registered:
            self.register(group, [tp[0]])
            self._registered.add((group, tp[0]))
        request = gpb.ResetOffsetRequest(group=group, topic=tp[0], partition=tp[1], offset=offset)
        r = self.router.call_partition(tp[0], tp[1],
                                       lambda conn: self.stub(conn).ResetOffset(request, timeout=self.timeout_s))
        return r.offset

    def fetch_offset(self, group: str, tp: TopicPartition, consistent: bool = False,
                     member: tuple[str, int] | None = None) -> gpb.PartitionOffset:
        """The committed offset; `member` (member_id, generation) on a consistent read makes it the owner's start,
        which fences commits of older generations at the partition."""
        member_id, generation = member or ("", 0)
        request = gpb.FetchOffsetRequest(group=group, topic=tp[0], partition=tp[1], consistent=consistent,
                                         member_id=member_id, generation=generation)
        return self.router.call_partition(tp[0], tp[1],
                                          lambda conn: self.stub(conn).FetchOffset(request, timeout=self.timeout_s))

    # ------------------------------------------------------------------ any broker
    def list_groups(self) -> list[gpb.GroupInfo]:
        response = self.router.call_any(
            lambda conn: self.stub(conn).ListGroups(gpb.ListGroupsRequest(), timeout=self.timeout_s))
        return list(response.groups)

    def describe_group(self, group: str) -> gpb.GroupInfo:
        request = gpb.DescribeGroupRequest(group=group)
        return self.router.call_any(lambda conn: self.stub(conn).DescribeGroup(request, timeout=self.timeout_s))
