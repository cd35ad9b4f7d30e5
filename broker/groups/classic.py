"""The rules of Kafka's classic group protocol as the metadata state machine applies them. Pure.

The coordinator (broker/groups/coordinator.py, on the controller) runs the join phase in memory: it collects the
members' JoinGroup requests until every member has joined again or the rebalance timeout passed. What outlives a
coordinator is committed here, by four commands:

    classic_join           a new member (or a static member under a new member id): the group needs a rebalance,
                           unless a static member came back to a stable group without changing its protocols
    classic_complete_join  the join phase's outcome: the members that joined (with their latest protocols and
                           timeouts), the others dropped (static members stay), the protocol every member
                           supports with the most votes, the leader; the command's index is the new generation
    classic_sync           the leader's assignment of that generation: the group is stable
    classic_leave          members that left or whose session expired: the rest must join again

A classic group's generation is, as for every raftbus group, the metadata log index of the command that made it,
so it only grows (also across a deletion and re-creation) and a broker knows whether it has seen it; Kafka's
clients carry it as their generation id. Its `members` and `owners` (raftbus's views) are derived from the
protocol bytes: subscribed topics and assigned partitions as consumer_protocol.py decodes them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from raftbus.client import errors

from raftbus.broker.groups import consumer_protocol
from raftbus.broker.groups.classic_state import (
    COMPLETING,
    PREPARING,
    STABLE,
    ClassicMember,
    ClassicState,
    common_protocols,
    protocols_from_json,
    select_protocol,
)
from raftbus.broker.groups.rules import (
    CLASSIC,
    CLIENT_ID_BYTES_MAX,
    ConsumerGroup,
    Member,
    Owner,
    adopt,
    new_group,
    validate_group_name,
    validate_member_id,
)

PROTOCOL_NAME_BYTES_MAX = 255
INSTANCE_ID_BYTES_MAX = 255


def _member_of(payload: dict, member_id: str, now_ms: int, known: ClassicMember | None) -> ClassicMember:
    try:
        protocols = protocols_from_json(payload["protocols"])
    except ValueError as exc:
        raise errors.InvalidArgument(f"classic_join: {exc}") from None
    if not protocols:
        raise errors.InconsistentGroupProtocol("a member of a classic group names at least one protocol")
    if any(not name or len(name) > PROTOCOL_NAME_BYTES_MAX for name, _ in protocols):
        raise errors.InvalidArgument(f"protocol names have 1 to {PROTOCOL_NAME_BYTES_MAX} characters")
    instance_id = payload.get("instance_id", "")
    if not isinstance(instance_id, str) or len(instance_id) > INSTANCE_ID_BYTES_MAX:
        raise errors.InvalidArgument(f"instance_id must be a string of at most {INSTANCE_ID_BYTES_MAX} characters")
    validate_member_id(payload["client_id"], "client_id", CLIENT_ID_BYTES_MAX)
    return ClassicMember(member_id=member_id, instance_id=instance_id, client_id=payload["client_id"],
                         client_host=str(payload.get("client_host", ""))[:255],
                         session_timeout_ms=payload["session_timeout_ms"],
                         rebalance_timeout_ms=payload["rebalance_timeout_ms"], protocols=protocols,
                         assignment=known.assignment if known else b"",
                         joined_ms=known.joined_ms if known else now_ms)


def _classic_group(group: ConsumerGroup | None, name: str, protocol_type: str, groups_count: int,
                   groups_max: int, now_ms: int) -> ConsumerGroup:
    """The group as a classic group of `protocol_type` (created, or adopted while empty)."""
    if group is None:
        if groups_count >= groups_max:
            raise errors.GroupLimitReached(f"{groups_count} groups exist (groups_max={groups_max})")
        group = new_group(name, now_ms)
    group = adopt(group, CLASSIC)
    if group.classic is None or not group.members:
        return dataclasses.replace(group, classic=ClassicState(protocol_type=protocol_type, phase=STABLE))
    if group.classic.protocol_type != protocol_type:
        raise errors.InconsistentGroupProtocol(f"group {name!r} is a group of protocol type "
                                               f"{group.classic.protocol_type!r}, not {protocol_type!r}")
    return group


def join(group: ConsumerGroup | None, payload: dict, partition_counts: Mapping[str, int], groups_count: int,
         index: int) -> ConsumerGroup:
    """A new member, or a static member back under a new member id (its old id is replaced). The group then
    prepares a rebalance, except for a static member coming back to a stable group without changing which
    protocol the group would select: it takes its predecessor's place and assignment."""
    name, member_id, now_ms = payload["group"], payload["member_id"], payload["now_ms"]
    validate_group_name(name)
    validate_member_id(member_id)
    if not member_id:
        raise errors.InvalidArgument("the joining member needs a member_id")
    protocol_type = payload["protocol_type"]
    if not isinstance(protocol_type, str) or not protocol_type:
        raise errors.InconsistentGroupProtocol("a member of a classic group names its protocol type")
    if payload["session_timeout_ms"] < 1 or payload["rebalance_timeout_ms"] < 1:
        raise errors.InvalidSessionTimeout("session and rebalance timeouts must be >= 1 ms")
    group = _classic_group(group, name, protocol_type, groups_count, payload["groups_max"], now_ms)
    classic = group.classic
    replaced = classic.static_member(payload.get("instance_id", ""))
    known = classic.members.get(member_id) or replaced
    member = _member_of(payload, member_id, now_ms, known)
    others = [m for m in classic.members.values() if m.member_id not in (member_id, getattr(replaced, "member_id", ""))]
    if others and not common_protocols([*others, member]):
        raise errors.InconsistentGroupProtocol(f"member {member_id!r} supports none of the protocols every member "
                                               f"of group {name!r} supports")
    if known is None and len(classic.members) >= payload["members_max"]:
        raise errors.GroupLimitReached(
            f"group {name!r} has {len(classic.members)} members (group_members_max={payload['members_max']})")
    members = {}
    for existing in classic.members.values():  # the replacement takes its predecessor's place in the order
        if existing is replaced or existing.member_id == member_id:
            members[member_id] = member
        else:
            members[existing.member_id] = existing
    members.setdefault(member_id, member)
    if replaced is not None and classic.phase == STABLE and classic.members and \
            select_protocol(members.values()) == classic.protocol_name:
        leader = member_id if classic.leader == replaced.member_id else classic.leader
        return _derived(group, classic.with_members(members, leader=leader), group.generation, now_ms)
    return _derived(group, classic.with_members(members, phase=PREPARING), group.generation, now_ms)


def complete_join(group: ConsumerGroup | None, payload: dict, partition_counts: Mapping[str, int],
                  index: int) -> ConsumerGroup:
    """The join phase's outcome: generation `index` of the members that joined (in the order they joined) and of
    the static members that did not; the selected protocol; the leader (the previous one if it joined, else the
    first that did)."""
    name, now_ms = payload["group"], payload["now_ms"]
    group = require_classic(group, name)
    classic = group.classic
    joined: dict[str, dict] = {}
    for entry in payload["members"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("member_id"), str) or \
                not isinstance(entry.get("protocols"), list) or \
                not all(_is_int(entry.get(k)) for k in ("session_timeout_ms", "rebalance_timeout_ms")):
            raise errors.InvalidArgument("classic_complete_join members are objects with member_id, protocols, "
                                         "session_timeout_ms and rebalance_timeout_ms")
        if entry["member_id"] in classic.members:
            joined[entry["member_id"]] = entry
    members = {}
    for member_id, entry in joined.items():
        known = classic.members[member_id]
        members[member_id] = _member_of({**entry, "client_id": known.client_id, "instance_id": known.instance_id,
                                         "client_host": known.client_host}, member_id, now_ms, known)
    for member in classic.members.values():  # static members keep their place while they are away
        if member.member_id not in members and member.instance_id:
            members[member.member_id] = member
    if not members:
        return _derived(group, classic.with_members({}, phase=STABLE, leader="", protocol_name=""), index, now_ms)
    protocol_name = select_protocol(members.values())
    if not protocol_name:
        raise errors.InconsistentGroupProtocol(f"the members of group {name!r} share no protocol")
    leader = classic.leader if classic.leader in joined else next(iter(joined), next(iter(members)))
    return _derived(group, classic.with_members(members, phase=COMPLETING, leader=leader,
                                                protocol_name=protocol_name), index, now_ms)


def sync(group: ConsumerGroup | None, payload: dict, partition_counts: Mapping[str, int],
         index: int) -> ConsumerGroup:
    """The leader's assignment of the group's current generation (a member it names no assignment for gets an
    empty one)."""
    name, member_id, generation, now_ms = payload["group"], payload["member_id"], payload["generation"], \
        payload["now_ms"]
    group = require_classic(group, name)
    classic = group.classic
    if member_id not in classic.members:
        raise errors.UnknownMember(f"member {member_id!r} is not in group {name!r}; join again")
    if generation != group.generation:
        raise errors.StaleGeneration(f"generation {generation} is not group {name!r}'s ({group.generation})")
    if classic.phase != COMPLETING:
        raise errors.RebalanceInProgress(f"group {name!r} is not waiting for an assignment (it is {classic.phase})")
    if member_id != classic.leader:
        raise errors.InvalidArgument(f"only the leader ({classic.leader!r}) hands out the assignment")
    assignments = {}
    for pair in payload["assignments"]:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, str) for v in pair)):
            raise errors.InvalidArgument("assignments are [member_id, base64 assignment] pairs")
        try:
            assignments[pair[0]] = protocols_from_json([pair])[0][1]
        except ValueError as exc:
            raise errors.InvalidArgument(f"classic_sync: {exc}") from None
    members = {m: dataclasses.replace(v, assignment=assignments.get(m, b"")) for m, v in classic.members.items()}
    return _derived(group, classic.with_members(members, phase=STABLE), group.generation, now_ms)


def leave(group: ConsumerGroup | None, payload: dict, partition_counts: Mapping[str, int],
          index: int) -> ConsumerGroup:
    """Members that left or expired (those already gone are no error): the rest must join again; a group left
    without members is empty at generation `index`."""
    name, now_ms = payload["group"], payload["now_ms"]
    group = require_classic(group, name)
    classic = group.classic
    gone = set(payload["member_ids"])
    if not gone & set(classic.members):
        return group
    members = {m: v for m, v in classic.members.items() if m not in gone}
    if not members:
        return _derived(group, classic.with_members({}, phase=STABLE, leader="", protocol_name=""), index, now_ms)
    return _derived(group, classic.with_members(members, phase=PREPARING), group.generation, now_ms)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def require_classic(group: ConsumerGroup | None, name: str) -> ConsumerGroup:
    if group is None:
        raise errors.UnknownGroup(f"group {name!r} does not exist")
    if group.protocol != CLASSIC or group.classic is None:
        raise errors.InconsistentGroupProtocol(f"group {name!r} is not a group of Kafka's classic protocol")
    return group


def _derived(group: ConsumerGroup, classic: ClassicState, generation: int, now_ms: int) -> ConsumerGroup:
    """The group with `classic` and raftbus's views of it: members with their subscribed topics and assigned
    partitions (when the bytes are the consumer protocol's), owners, topics, the empty/changed times."""
    consumer = classic.protocol_type == consumer_protocol.PROTOCOL_TYPE
    members, owners = {}, {}
    for m in classic.members.values():
        topics = (consumer_protocol.subscription_topics(m.metadata_of(classic.protocol_name)
                                                        or (m.protocols[0][1] if m.protocols else b""))
                  if consumer else None) or ()
        target = (consumer_protocol.assignment_partitions(m.assignment) if consumer else None) or ()
        members[m.member_id] = Member(member_id=m.member_id, client_id=m.client_id, topics=topics,
                                      session_timeout_ms=m.session_timeout_ms,
                                      rebalance_timeout_ms=m.rebalance_timeout_ms, joined_ms=m.joined_ms,
                                      target=target)
        for tp in target:
            owners.setdefault(tp, Owner(m.member_id, generation))
    topics = tuple(sorted({t for m in members.values() for t in m.topics})) if members else group.topics
    empty_since = -1 if members else (group.empty_since_ms if group.empty_since_ms >= 0 and not group.members
                                      else now_ms)
    return dataclasses.replace(group, generation=generation, changed_ms=now_ms, members=members, owners=owners,
                               topics=topics, classic=classic, empty_since_ms=empty_since)


# ---------------------------------------------------------------------- fencing of offsets (services call this)
def check_commit(group: ConsumerGroup | None, applied_index: int, name: str, member_id: str,
                 generation: int) -> None:
    """Raise unless a classic group's offset commit may go ahead, as Kafka's coordinator decides: a member of the
    group at its current generation (not while the leader's assignment is awaited), or, without member and
    generation, a group that has no members (an admin tool, a consumer that assigns itself partitions).

    `applied_index` is this metadata replica's, read before `group`: a replica that has not applied the
    generation yet answers MetadataBehind (retriable) instead of judging with old knowledge.
    """
    if generation < 0 and not member_id:
        if group is not None and group.members:
            raise errors.UnknownMember(f"group {name!r} has members: commit as one of them (member id and "
                                       "generation), or once the group is empty")
        return
    if applied_index < generation:
        raise errors.MetadataBehind(f"this broker has applied metadata up to {applied_index}, the member is at "
                                    f"generation {generation}; retry")
    if group is None or group.classic is None or member_id not in group.members:
        raise errors.UnknownMember(f"member {member_id!r} is not in group {name!r}; join again")
    if generation != group.generation:
        raise errors.StaleGeneration(f"generation {generation} is not group {name!r}'s ({group.generation})")
    if group.classic.phase == COMPLETING:
        raise errors.RebalanceInProgress(f"group {name!r} awaits its leader's assignment of generation "
                                         f"{group.generation}")
