"""What a group of Kafka's classic protocol keeps beside raftbus's view of it: the members' supported protocols
and assignments as the clients sent them, the selected protocol, the leader and the phase. Pure.

A classic group is a `ConsumerGroup` of protocol "classic" (rules.py): its `members` and `owners` are derived
from these bytes (the subscriptions' topics, the assignments' partitions, decoded by consumer_protocol.py), so
every view of raftbus's groups (describe, lag, the gateway, metrics) shows it; the bytes themselves are what the
Kafka port hands back to the clients.

Phases (Kafka's group states; Empty is a group without members):
    preparing   a rebalance is due: members must join again (JoinGroup) before the next generation
    completing  the join phase completed a generation; the leader's SyncGroup with the assignment is awaited
    stable      the generation's assignment is stored
"""
from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

PREPARING, COMPLETING, STABLE = "preparing", "completing", "stable"
PHASES = (PREPARING, COMPLETING, STABLE)

Protocols = tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's order of preference


@dataclass(frozen=True)
class ClassicMember:
    member_id: str
    instance_id: str  # group.instance.id of a static member; "" for a dynamic one
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: Protocols
    assignment: bytes = b""
    joined_ms: int = 0

    def metadata_of(self, protocol_name: str) -> bytes:
        return next((metadata for name, metadata in self.protocols if name == protocol_name), b"")

    def state_bytes(self) -> int:
        """What the member adds to its group's stored state (the bound `kafka_group_state_bytes_max`)."""
        return len(self.assignment) + sum(len(n) + len(m) for n, m in self.protocols) + len(self.member_id) + \
            len(self.instance_id) + len(self.client_id) + len(self.client_host)

    def to_dict(self) -> dict:
        return {"member_id": self.member_id, "instance_id": self.instance_id, "client_id": self.client_id,
                "client_host": self.client_host, "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms, "protocols": protocols_to_json(self.protocols),
                "assignment": b64(self.assignment), "joined_ms": self.joined_ms}

    @classmethod
    def from_dict(cls, data: dict) -> "ClassicMember":
        return cls(member_id=data["member_id"], instance_id=data["instance_id"], client_id=data["client_id"],
                   client_host=data["client_host"], session_timeout_ms=int(data["session_timeout_ms"]),
                   rebalance_timeout_ms=int(data["rebalance_timeout_ms"]),
                   protocols=protocols_from_json(data["protocols"]), assignment=unb64(data["assignment"]),
                   joined_ms=int(data["joined_ms"]))


@dataclass(frozen=True)
class ClassicState:
    protocol_type: str
    protocol_name: str = ""  # selected when the last join phase completed
    leader: str = ""
    phase: str = PREPARING
    members: Mapping[str, ClassicMember] = field(default_factory=dict)  # in the order they joined

    def static_member(self, instance_id: str) -> ClassicMember | None:
        if not instance_id:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def state_bytes(self) -> int:
        return sum(m.state_bytes() for m in self.members.values())

    def with_members(self, members: Mapping[str, ClassicMember], **changes) -> "ClassicState":
        return replace(self, members=dict(members), **changes)

    def to_dict(self) -> dict:
        return {"protocol_type": self.protocol_type, "protocol_name": self.protocol_name, "leader": self.leader,
                "phase": self.phase, "members": [m.to_dict() for m in self.members.values()]}

    @classmethod
    def from_dict(cls, data: dict) -> "ClassicState":
        members = [ClassicMember.from_dict(m) for m in data["members"]]
        return cls(protocol_type=data["protocol_type"], protocol_name=data["protocol_name"], leader=data["leader"],
                   phase=data["phase"], members={m.member_id: m for m in members})


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode(), validate=True)


def protocols_to_json(protocols: Protocols) -> list:
    return [[name, b64(metadata)] for name, metadata in protocols]


def protocols_from_json(raw) -> Protocols:
    """(name, metadata) pairs of a command or a stored member; ValueError when malformed."""
    if not isinstance(raw, list) or not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
                                            and isinstance(p[1], str) for p in raw):
        raise ValueError("protocols must be [name, base64 metadata] pairs")
    return tuple((name, unb64(metadata)) for name, metadata in raw)


def common_protocols(members) -> list[str]:
    """The protocol names every one of `members` supports, in the first member's order of preference."""
    members = list(members)
    if not members:
        return []
    shared = set.intersection(*({name for name, _ in m.protocols} for m in members))
    return [name for name, _ in members[0].protocols if name in shared]


def select_protocol(members) -> str:
    """Kafka's choice: among the protocols every member supports, each member votes for its most preferred one;
    the most votes win (ties: the name first in alphabetical order). "" when they share none."""
    members = list(members)
    candidates = set(common_protocols(members))
    if not candidates:
        return ""
    votes: dict[str, int] = {}
    for member in members:
        choice = next(name for name, _ in member.protocols if name in candidates)
        votes[choice] = votes.get(choice, 0) + 1
    return min(votes, key=lambda name: (-votes[name], name))
