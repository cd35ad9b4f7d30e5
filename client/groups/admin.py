"""What Admin reports about consumer groups: members, assignment, committed offsets and lag.

Membership comes from any broker's metadata replica (DescribeGroup); committed offsets and lag come from each
partition's leader (FetchOffset), since offsets live in the partitions' own Raft groups.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from raftbus.client.errors import InvalidArgument, UnknownTopic
from raftbus.client.groups.calls import GroupCalls, TopicPartition
from raftbus.client.wire import groups_pb2 as gpb


def _tps(items) -> tuple[TopicPartition, ...]:
    return tuple(sorted(TopicPartition(tp.topic, tp.partition) for tp in items))


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    client_id: str
    topics: tuple[str, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    joined_ms: int
    owned: tuple[TopicPartition, ...]   # what it may consume now
    target: tuple[TopicPartition, ...]  # what the sticky assignor wants it to own

    @classmethod
    def from_proto(cls, m: gpb.GroupMember) -> "MemberDescription":
        return cls(m.member_id, m.client_id, tuple(m.topics), m.session_timeout_ms, m.rebalance_timeout_ms,
                   m.joined_ms, _tps(m.owned), _tps(m.target))

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(topics=list(self.topics), owned=[list(tp) for tp in self.owned],
                    target=[list(tp) for tp in self.target])
        return data


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A group's position in one partition; committed_offset None = never committed (lags are then None)."""

    topic: str
    partition: int
    owner: str | None
    committed_offset: int | None
    log_start_offset: int
    high_watermark: int
    lag_records: int | None
    lag_s: float | None  # age of the oldest unconsumed record; 0 when caught up

    @classmethod
    def from_proto(cls, p: gpb.PartitionOffset, owner: str | None) -> "PartitionLag":
        committed = p.committed_offset >= 0
        return cls(p.topic, p.partition, owner, p.committed_offset if committed else None, p.log_start_offset,
                   p.high_watermark, p.lag_records if committed else None, p.lag_ms / 1000 if committed else None)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class GroupDescription:
    name: str
    generation: int
    state: str  # "stable", "rebalancing" or "empty"
    topics: tuple[str, ...]
    members: tuple[MemberDescription, ...]
    created_ms: int
    changed_ms: int
    partitions: tuple[PartitionLag, ...] = ()  # filled by describe_group, empty in list_groups

    @classmethod
    def from_proto(cls, info: gpb.GroupInfo, partitions=()) -> "GroupDescription":
        return cls(info.name, info.generation, info.state, tuple(info.topics),
                   tuple(MemberDescription.from_proto(m) for m in info.members), info.created_ms, info.changed_ms,
                   tuple(partitions))

    def to_dict(self) -> dict:
        return {"name": self.name, "generation": self.generation, "state": self.state, "topics": list(self.topics),
                "members": [m.to_dict() for m in self.members], "created_ms": self.created_ms,
                "changed_ms": self.changed_ms, "partitions": [p.to_dict() for p in self.partitions]}

    @property
    def lag_records(self) -> int:
        return sum(p.lag_records or 0 for p in self.partitions)


def list_groups(calls: GroupCalls) -> list[GroupDescription]:
    return [GroupDescription.from_proto(info) for info in calls.list_groups()]


def describe_group(calls: GroupCalls, name: str) -> GroupDescription:
    """Members and assignment, plus committed offset and lag of every partition of the subscribed topics."""
    info = calls.describe_group(name)
    owners = {tp: m.member_id for m in info.members for tp in _tps(m.owned)}
    partitions = []
    for topic in info.topics:
        try:
            count = calls.router.partitions_for(topic)
        except UnknownTopic:
            continue
        for partition in range(count):
            tp = TopicPartition(topic, partition)
            partitions.append(PartitionLag.from_proto(calls.fetch_offset(name, tp), owners.get(tp)))
    return GroupDescription.from_proto(info, partitions)


@dataclass(frozen=True, slots=True)
class OffsetResetSpec:
    """Where kafka-consumer-groups' --reset-offsets puts a group: exactly one of the four targets."""
    to_earliest: bool = False
    to_latest: bool = False
    to_offset: int | None = None
    to_time_ms: int | None = None

    def check(self) -> None:
        given = sum((self.to_earliest, self.to_latest, self.to_offset is not None, self.to_time_ms is not None))
        if given != 1:
            raise InvalidArgument("name exactly one of to_earliest, to_latest, to_offset, to_time_ms")
        if self.to_offset is not None and (not isinstance(self.to_offset, int) or self.to_offset < 0):
            raise InvalidArgument(f"to_offset must be an offset >= 0, not {self.to_offset!r}")
        if self.to_time_ms is not None and (not isinstance(self.to_time_ms, int) or self.to_time_ms < 0):
            raise InvalidArgument(f"to_time_ms must be a time in ms >= 0, not {self.to_time_ms!r}")

    def offset_in(self, log_start: int, high_watermark: int, offset_at_time: int | None) -> int:
        """The offset this spec picks in a partition holding [log_start, high_watermark); an explicit offset
        outside the log is clamped to it, as Kafka does."""
        if self.to_earliest:
            return log_start
        if self.to_latest:
            return high_watermark
        wanted = self.to_offset if self.to_offset is not None else offset_at_time
        return min(max(wanted, log_start), high_watermark)
