"""Consumer-group rules: membership, the target assignment, the hand-over of partitions, and fencing. Pure.

A group has members (each subscribed to topics), a *target* assignment computed by the sticky assignor, and
*owners*: which member may consume each partition right now, and since which generation. Ownership lags the
target on purpose (two-phase hand-over, like Kafka's cooperative protocol): when the target moves partition p
from A to B, A keeps owning p until it has committed and says so (`release`); only then does p go to B. So no
partition ever has two owners, and A can commit what it processed before it lets go.

The generation is the metadata log index of the last change to the target or the owners. It increases with
every change, also across a group's deletion and re-creation, so comparing it with a broker's applied metadata
index tells whether that broker has seen it yet. A member's request at generation g is fenced per partition:
the member must own the partition, and must have owned it since g or earlier.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from raftbus.client import errors

from raftbus.broker.groups import assignor
from raftbus.broker.groups.classic_state import STABLE as CLASSIC_STABLE, ClassicState

TopicPartition = tuple[str, int]

# Who a group's members are: raftbus's own consumers, Kafka's classic protocol (JoinGroup/SyncGroup, the leader
# assigns), Kafka's consumer protocol (KIP-848: ConsumerGroupHeartbeat, this broker's sticky assignor assigns).
RAFTBUS, CLASSIC, CONSUMER = "raftbus", "classic", "consumer"
PROTOCOLS = (RAFTBUS, CLASSIC, CONSUMER)

GROUP_NAME_BYTES_MAX = 249
MEMBER_ID_BYTES_MAX = 255
CLIENT_ID_BYTES_MAX = 255
_GROUP_NAME = re.compile(r"[A-Za-z0-9._-]+")
_PRINTABLE = re.compile(r"[\x21-\x7e]+")

EMPTY, STABLE, REBALANCING = "empty", "stable", "rebalancing"


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    topics: tuple[str, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    joined_ms: int
    target: tuple[TopicPartition, ...] = ()
    revoking_since_ms: int = -1  # since when it owns partitions outside its target; -1 when it does not

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "topics": list(self.topics), "target": [list(tp) for tp in self.target]}

    @classmethod
    def from_dict(cls, data: dict) -> "Member":
        return cls(member_id=data["member_id"], client_id=data["client_id"], topics=tuple(data["topics"]),
                   session_timeout_ms=int(data["session_timeout_ms"]),
                   rebalance_timeout_ms=int(data["rebalance_timeout_ms"]), joined_ms=int(data["joined_ms"]),
                   target=tuple((t, int(p)) for t, p in data["target"]),
                   revoking_since_ms=int(data["revoking_since_ms"]))


@dataclass(frozen=True)
class Owner:
    member_id: str
    since_generation: int


@dataclass(frozen=True)
class ConsumerGroup:
    name: str
    generation: int
    created_ms: int
    changed_ms: int
    empty_since_ms: int  # -1 while it has members
    members: Mapping[str, Member]
    owners: Mapping[TopicPartition, Owner]
    topics: tuple[str, ...] = ()  # what its members subscribe to; kept when the group empties (for its offsets)
    protocol: str = RAFTBUS
    classic: ClassicState | None = None  # a classic group's protocols, assignments, leader and phase

    # ------------------------------------------------------------------ views
    def owned_by(self, member_id: str) -> tuple[TopicPartition, ...]:
        return tuple(sorted(tp for tp, owner in self.owners.items() if owner.member_id == member_id))

    def owned_by_member(self) -> dict[str, tuple[TopicPartition, ...]]:
        """Every member's owned partitions, in one pass over the owners."""
        owned = owned_sets(self.owners)
        return {m: tuple(sorted(owned.get(m, ()))) for m in self.members}

    def revoking(self, member_id: str) -> tuple[TopicPartition, ...]:
        """Partitions the member owns but must give up (not in its target)."""
        target = set(self.members[member_id].target)
        return tuple(tp for tp in self.owned_by(member_id) if tp not in target)

    def pending(self, member_id: str) -> tuple[TopicPartition, ...]:
        """Partitions of the member's target still owned by another member."""
        owners = self.owners
        return tuple(tp for tp in self.members[member_id].target if owners[tp].member_id != member_id)

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.classic is not None:
            return STABLE if self.classic.phase == CLASSIC_STABLE else REBALANCING
        owned = owned_sets(self.owners)
        settled = all(owned.get(m, set()) == set(member.target) for m, member in self.members.items())
        return STABLE if settled else REBALANCING

    # ------------------------------------------------------------------ storage
    def to_dict(self) -> dict:
        out = {"name": self.name, "generation": self.generation, "created_ms": self.created_ms,
               "changed_ms": self.changed_ms, "empty_since_ms": self.empty_since_ms, "topics": list(self.topics),
               "members": [self.members[m].to_dict() for m in sorted(self.members)],
               "owners": [[t, p, o.member_id, o.since_generation] for (t, p), o in sorted(self.owners.items())]}
        if self.protocol != RAFTBUS:  # raftbus's own groups are stored as they always were
            out["protocol"] = self.protocol
        if self.classic is not None:
            out["classic"] = self.classic.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "ConsumerGroup":
        members = {m["member_id"]: Member.from_dict(m) for m in data["members"]}
        owners = {(t, int(p)): Owner(member_id, int(since)) for t, p, member_id, since in data["owners"]}
        classic = data.get("classic")
        return cls(name=data["name"], generation=int(data["generation"]), created_ms=int(data["created_ms"]),
                   changed_ms=int(data["changed_ms"]), empty_since_ms=int(data["empty_since_ms"]),
                   members=members, owners=owners, topics=tuple(data["topics"]),
                   protocol=data.get("protocol", RAFTBUS),
                   classic=None if classic is None else ClassicState.from_dict(classic))


def owned_sets(owners: Mapping[TopicPartition, Owner]) -> dict[str, set[TopicPartition]]:
    owned: dict[str, set[TopicPartition]] = {}
    for tp, owner in owners.items():
        owned.setdefault(owner.member_id, set()).add(tp)
    return owned


def new_group(name: str, now_ms: int) -> ConsumerGroup:
    return ConsumerGroup(name=name, generation=0, created_ms=now_ms, changed_ms=now_ms, empty_since_ms=now_ms,
                         members={}, owners={})


# ---------------------------------------------------------------------- validation
def validate_group_name(name) -> None:
    """InvalidName unless name is 1..249 characters of [A-Za-z0-9._-] and not "." or ".."."""
    if not isinstance(name, str) or not 1 <= len(name) <= GROUP_NAME_BYTES_MAX:
        raise errors.InvalidName(f"a group name has 1 to {GROUP_NAME_BYTES_MAX} characters")
    if name in (".", "..") or not _GROUP_NAME.fullmatch(name):
        raise errors.InvalidName(f"group name {name!r} may only use A-Z, a-z, 0-9, '.', '_', '-' "
                                 "and is not '.' or '..'")


def validate_member_id(member_id, what: str = "member_id", limit: int = MEMBER_ID_BYTES_MAX) -> None:
    """Printable ASCII without spaces, at most `limit` characters ("" is allowed for a client id)."""
    if not isinstance(member_id, str) or len(member_id) > limit:
        raise errors.InvalidArgument(f"{what} must be a string of at most {limit} characters")
    if member_id and not _PRINTABLE.fullmatch(member_id):
        raise errors.InvalidArgument(f"{what} {member_id!r} may only use printable ASCII without spaces")


def printable_client_id(client_id: str | None) -> str:
    """A client id as a group member's: printable ASCII without spaces (others become "_"), at most
    CLIENT_ID_BYTES_MAX characters (Kafka's client ids may hold anything)."""
    return "".join(c if "\x21" <= c <= "\x7e" else "_" for c in client_id or "")[:CLIENT_ID_BYTES_MAX]


def _topic_list(topics, allow_empty: bool = False) -> tuple[str, ...]:
    if not isinstance(topics, list) or not (topics or allow_empty) or \
            not all(isinstance(t, str) and t for t in topics):
        raise errors.InvalidArgument("a member subscribes to a non-empty list of topic names")
    return tuple(sorted(set(topics)))


def _partition_list(partitions) -> list[TopicPartition]:
    try:
        parsed = [(t, p) for t, p in partitions]
    except (TypeError, ValueError):
        raise errors.InvalidArgument("partitions must be [topic, partition] pairs") from None
    if not all(isinstance(t, str) and isinstance(p, int) and not isinstance(p, bool) for t, p in parsed):
        raise errors.InvalidArgument("partitions must be [topic, partition] pairs")
    return parsed


# ---------------------------------------------------------------------- changes (each returns the new group)
def join(group: ConsumerGroup | None, payload: dict, partition_counts: Mapping[str, int], groups_count: int,
         index: int) -> ConsumerGroup:
    """Add a member, or update an existing member's subscription and timeouts. `protocol` in the payload says
    whose member it is: raftbus's own (the default) or Kafka's consumer protocol (whose members may subscribe to
    topics that do not exist yet, or to none)."""
    name, member_id, now_ms = payload["group"], payload["member_id"], payload["now_ms"]
    protocol = payload.get("protocol", RAFTBUS)
    if protocol not in (RAFTBUS, CONSUMER):
        raise errors.InvalidArgument(f"join_group protocol must be {RAFTBUS!r} or {CONSUMER!r}")
    validate_group_name(name)
    validate_member_id(member_id)
    validate_member_id(payload["client_id"], "client_id", CLIENT_ID_BYTES_MAX)
    if not member_id:
        raise errors.InvalidArgument("the joining member needs a member_id")
    topics = _topic_list(payload["topics"], allow_empty=protocol == CONSUMER)
    if payload["session_timeout_ms"] < 1 or payload["rebalance_timeout_ms"] < 1:
        raise errors.InvalidSessionTimeout("session and rebalance timeouts must be >= 1 ms")
    if group is None:
        if groups_count >= payload["groups_max"]:
            raise errors.GroupLimitReached(f"{groups_count} groups exist (groups_max={payload['groups_max']})")
        group = new_group(name, now_ms)
    group = adopt(group, protocol)
    known = group.members.get(member_id)
    if known is None and len(group.members) >= payload["members_max"]:
        raise errors.GroupLimitReached(
            f"group {name!r} has {len(group.members)} members (group_members_max={payload['members_max']})")
    member = Member(member_id=member_id, client_id=payload["client_id"], topics=topics,
                    session_timeout_ms=payload["session_timeout_ms"],
                    rebalance_timeout_ms=payload["rebalance_timeout_ms"], joined_ms=now_ms,
                    target=known.target if known else (), revoking_since_ms=known.revoking_since_ms if known else -1)
    members = {**group.members, member_id: member}
    return settle(group, members, group.owners, partition_counts, index, now_ms)


def adopt(group: ConsumerGroup, protocol: str) -> ConsumerGroup:
    """The group, to be used by members of `protocol`: an empty group changes protocol (its committed offsets
    stay: either port's consumers start from them); a group in use by another protocol's members refuses."""
    if group.protocol == protocol:
        return group
    if group.members:
        raise errors.InconsistentGroupProtocol(
            f"group {group.name!r} is in use by {len(group.members)} member(s) of the {group.protocol} protocol; a "
            f"member of the {protocol} protocol cannot join it until it is empty")
    return dataclasses.replace(group, protocol=protocol, classic=None, owners={})


def register(group: ConsumerGroup | None, payload: dict, partition_counts: Mapping[str, int],
             groups_count: int) -> ConsumerGroup:
    """A group that offsets were set for without a member (an operator's reset, a restore): created empty holding
    `topics`, or an empty group with `topics` added; a group with members keeps its members' subscriptions."""
    name, now_ms = payload["group"], payload["now_ms"]
    validate_group_name(name)
    topics = _topic_list(payload["topics"])
    unknown = [t for t in topics if t not in partition_counts]
    if unknown:
        raise errors.UnknownTopic(f"no stream topic named {unknown[0]!r}")
    if group is None:
        if groups_count >= payload["groups_max"]:
            raise errors.GroupLimitReached(f"{groups_count} groups exist (groups_max={payload['groups_max']})")
        return dataclasses.replace(new_group(name, now_ms), topics=topics)
    held = tuple(sorted(set(group.topics) | set(topics)))
    if group.members or held == group.topics:
        return group
    return dataclasses.replace(group, topics=held, changed_ms=now_ms)


def leave(group: ConsumerGroup | None, payload: dict, partition_counts: Mapping[str, int],
          index: int) -> ConsumerGroup:
    group = require_member(group, payload["group"], payload["member_id"])
    members = {m: v for m, v in group.members.items() if m != payload["member_id"]}
    return settle(group, members, group.owners, partition_counts, index, payload["now_ms"])


def expire(group: ConsumerGroup | None, payload: dict, partition_counts: Mapping[str, int],
           index: int) -> ConsumerGroup:
    """Remove the listed members that are still there (a member that left already is no error)."""
    if group is None:
        raise errors.UnknownGroup(f"group {payload['group']!r} does not exist")
    doomed = set(payload["member_ids"])
    members = {m: v for m, v in group.members.items() if m not in doomed}
    return settle(group, members, group.owners, partition_counts, index, payload["now_ms"])


def release(group: ConsumerGroup | None, payload: dict, partition_counts: Mapping[str, int],
            index: int) -> ConsumerGroup:
    """The member gave up these partitions (after committing); those outside its target go to their new owner."""
    group = require_member(group, payload["group"], payload["member_id"])
    member_id, generation = payload["member_id"], payload["generation"]
    if generation > group.generation:
        raise errors.StaleGeneration(f"generation {generation} is newer than the group's {group.generation}")
    target = set(group.members[member_id].target)
    released = {tp for tp in _partition_list(payload["partitions"])
                if tp not in target and group.owners.get(tp, Owner("", 0)).member_id == member_id}
    owners = {tp: o for tp, o in group.owners.items() if tp not in released}
    return settle(group, dict(group.members), owners, partition_counts, index, payload["now_ms"])


def refresh(group: ConsumerGroup, partition_counts: Mapping[str, int], index: int, now_ms: int) -> ConsumerGroup:
    """Re-settle after topics changed (created, grown, deleted); the same object when nothing changes."""
    return settle(group, dict(group.members), group.owners, partition_counts, index, now_ms)


def require_member(group: ConsumerGroup | None, name: str, member_id: str) -> ConsumerGroup:
    if group is None:
        raise errors.UnknownGroup(f"group {name!r} does not exist")
    if member_id not in group.members:
        raise errors.UnknownMember(f"member {member_id!r} is not in group {name!r} (left or expired); join again")
    return group


def settle(group: ConsumerGroup, members: dict[str, Member], owners: Mapping[TopicPartition, Owner],
           partition_counts: Mapping[str, int], index: int, now_ms: int) -> ConsumerGroup:
    """Recompute the target and give free partitions to their target member; a change makes generation `index`."""
    owners = {tp: o for tp, o in owners.items() if o.member_id in members and _exists(tp, partition_counts)}
    targets = assignor.assign({m: v.topics for m, v in members.items()}, partition_counts,
                              {m: v.target for m, v in members.items()})
    for m, tps in targets.items():
        for tp in tps:
            owners.setdefault(tp, Owner(m, index))
    owned = owned_sets(owners)
    settled = {m: _with_target(v, targets[m], owned.get(m, set()), now_ms) for m, v in members.items()}
    topics = tuple(sorted({t for v in settled.values() for t in v.topics})) if settled else group.topics
    if settled == dict(group.members) and owners == dict(group.owners) and topics == group.topics:
        return group
    if _assignment_view(settled) == _assignment_view(group.members) and owners == dict(group.owners):
        return dataclasses.replace(group, members=settled)  # e.g. a re-join that changed only timeouts
    return dataclasses.replace(
        group, generation=index, changed_ms=now_ms, members=settled, owners=owners, topics=topics,
        empty_since_ms=-1 if settled else (group.empty_since_ms if group.empty_since_ms >= 0 else now_ms))


def _assignment_view(members: Mapping[str, Member]) -> dict:
    """What members see of a generation: who is in, what each subscribes to and is meant to own."""
    return {m: (v.topics, v.target) for m, v in members.items()}


def _exists(tp: TopicPartition, partition_counts: Mapping[str, int]) -> bool:
    return 0 <= tp[1] < partition_counts.get(tp[0], 0)


def _with_target(member: Member, target: tuple[TopicPartition, ...], owned: set[TopicPartition],
                 now_ms: int) -> Member:
    revoking = not owned <= set(target)
    since = (member.revoking_since_ms if member.revoking_since_ms >= 0 else now_ms) if revoking else -1
    return dataclasses.replace(member, target=target, revoking_since_ms=since)


# ---------------------------------------------------------------------- fencing (services call this)
def check_owner(group: ConsumerGroup | None, applied_index: int, name: str, member_id: str, generation: int,
                tp: TopicPartition) -> None:
    """Raise unless `member_id` at `generation` may fetch or commit `tp` by this metadata replica.

    `applied_index` is the replica's applied metadata index, read BEFORE `group`: a replica that has not
    applied `generation` yet answers MetadataBehind (retriable) instead of judging with old knowledge.
    """
    if group is not None and group.protocol == CLASSIC:
        raise errors.InconsistentGroupProtocol(f"group {name!r} uses Kafka's classic protocol: its members commit "
                                               "through the Kafka port's group coordinator")
    if generation < 1:
        raise errors.StaleGeneration("a member needs a generation from its assignment before fetching or committing")
    if applied_index < generation:
        raise errors.MetadataBehind(f"this broker has applied metadata up to {applied_index}, "
                                    f"the member is at generation {generation}; retry")
    group = require_member(group, name, member_id)
    owner = group.owners.get(tp)
    if owner is None or owner.member_id != member_id:
        raise errors.PartitionNotAssigned(f"member {member_id!r} does not own {tp[0]}/{tp[1]} in group {name!r} "
                                          f"(generation {group.generation})")
    if owner.since_generation > generation:
        raise errors.StaleGeneration(f"member {member_id!r} owns {tp[0]}/{tp[1]} since generation "
                                     f"{owner.since_generation}; the request is from generation {generation}")


def overdue_members(group: ConsumerGroup, last_heartbeat_ms: Mapping[str, int], not_before_ms: int,
                    now_ms: int) -> list[str]:
    """Members past their session timeout, or holding revoked partitions past their rebalance timeout.

    A member's clock starts at the latest of its join, its last heartbeat and `not_before_ms` (when this
    controller took over: the grace period after a failover).
    """
    doomed = []
    for m, member in sorted(group.members.items()):
        seen = max(member.joined_ms, last_heartbeat_ms.get(m, -1), not_before_ms)
        silent = now_ms - seen > member.session_timeout_ms
        revoking_ms = max(member.revoking_since_ms, not_before_ms)
        stuck = member.revoking_since_ms >= 0 and now_ms - revoking_ms > member.rebalance_timeout_ms
        if silent or stuck:
            doomed.append(m)
    return doomed


def partition_counts_of(topics: Iterable) -> dict[str, int]:
    """{topic: partition count} of the stream topics among model.Topic values (what groups may subscribe to)."""
    return {t.name: len(t.partitions) for t in topics if t.kind == "stream"}
