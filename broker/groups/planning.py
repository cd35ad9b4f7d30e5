"""How the metadata state machine plans consumer-group commands and re-settles groups after topic changes. Pure.

Each function returns (result, changes) where changes is a tuple of (group name, new ConsumerGroup or None
when deleted); a refusal raises a typed error and changes nothing.
"""
from __future__ import annotations

from collections.abc import Mapping

from raftbus.client import errors

from raftbus.broker.groups import classic
from raftbus.broker.groups import commands as group_commands
from raftbus.broker.groups import rules

_MEMBER_CHANGES = {group_commands.LEAVE_GROUP: rules.leave, group_commands.EXPIRE_MEMBERS: rules.expire,
                   group_commands.RELEASE_PARTITIONS: rules.release,
                   group_commands.CLASSIC_COMPLETE_JOIN: classic.complete_join,
                   group_commands.CLASSIC_SYNC: classic.sync, group_commands.CLASSIC_LEAVE: classic.leave}


def plan_group_command(groups: Mapping[str, rules.ConsumerGroup], topics: Mapping, index: int, kind: str,
                       payload: dict):
    """The new state of the group named in `payload` after `kind`; the result is that group (None: deleted)."""
    name = payload["group"]
    group = groups.get(name)
    counts = rules.partition_counts_of(topics.values())
    if kind == group_commands.DELETE_GROUP:
        return None, _delete(group, name)
    if kind == group_commands.JOIN_GROUP:
        changed = rules.join(group, payload, counts, len(groups), index)
    elif kind == group_commands.CLASSIC_JOIN:
        changed = classic.join(group, payload, counts, len(groups), index)
    elif kind == group_commands.REGISTER_GROUP:
        changed = rules.register(group, payload, counts, len(groups))
    else:
        if kind in (group_commands.EXPIRE_MEMBERS, group_commands.CLASSIC_LEAVE):
            _check_ids(payload["member_ids"])
        if kind not in group_commands.CLASSIC_KINDS and group is not None and group.protocol == rules.CLASSIC:
            raise errors.InconsistentGroupProtocol(f"group {name!r} uses Kafka's classic protocol")
        changed = _MEMBER_CHANGES[kind](group, payload, counts, index)
    return changed, (((name, changed),) if changed is not group else ())


def _delete(group: rules.ConsumerGroup | None, name: str):
    if group is None:
        raise errors.UnknownGroup(f"group {name!r} does not exist")
    if group.members:
        raise errors.InvalidArgument(f"group {name!r} still has {len(group.members)} members")
    return ((name, None),)


def _check_ids(member_ids) -> None:
    if not all(isinstance(m, str) for m in member_ids):
        raise errors.InvalidArgument("member_ids must be strings")


def resettle_after_topic_change(groups: Mapping[str, rules.ConsumerGroup], topics: Mapping, topic_name: str,
                                index: int, now_ms: int) -> tuple:
    """Re-settle every group subscribed to `topic_name` against `topics` (the topics after the change)."""
    counts = rules.partition_counts_of(topics.values())
    changes = []
    for name in sorted(groups):
        group = groups[name]
        if group.protocol == rules.CLASSIC:  # its leader assigns; the members see the topic change themselves
            continue
        if any(topic_name in member.topics for member in group.members.values()):
            settled = rules.refresh(group, counts, index, now_ms)
            if settled is not group:
                changes.append((name, settled))
    return tuple(changes)
