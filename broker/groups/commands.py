"""Consumer-group commands: membership in the metadata group, committed offsets in each partition's group.

Metadata commands are JSON objects like every metadata command (b"J" + JSON with "type"; `commands.decode_json`
checks the top-level fields listed in METADATA_FIELDS, the group rules check nested values).
Partition commands: b"G" + compact JSON object with a "type" field:
    commit_offset  store a group's committed offset for this partition (fenced, never backwards unless reset)
    read_offset    read a group's committed offset through the log (a read barrier on a new leader); with a
                   generation (a new owner's first read) it also fences commits from older generations
    delete_offset  forget a group's committed offset (the generation fence stays)
    expire_offsets drop the offsets of groups gone for offsets_retention_ms
"""
from __future__ import annotations

import json

from raftbus.broker import commands
from raftbus.broker.groups import classic_state
from raftbus.client import errors

JOIN_GROUP = "join_group"
LEAVE_GROUP = "leave_group"
EXPIRE_MEMBERS = "expire_members"
RELEASE_PARTITIONS = "release_partitions"
DELETE_GROUP = "delete_group"
REGISTER_GROUP = "register_group"
# Kafka's classic protocol (broker/groups/classic.py)
CLASSIC_JOIN = "classic_join"
CLASSIC_COMPLETE_JOIN = "classic_complete_join"
CLASSIC_SYNC = "classic_sync"
CLASSIC_LEAVE = "classic_leave"
CLASSIC_KINDS = frozenset({CLASSIC_JOIN, CLASSIC_COMPLETE_JOIN, CLASSIC_SYNC, CLASSIC_LEAVE})
METADATA_KINDS = frozenset({JOIN_GROUP, LEAVE_GROUP, EXPIRE_MEMBERS, RELEASE_PARTITIONS, DELETE_GROUP,
                            REGISTER_GROUP}) | CLASSIC_KINDS

COMMIT_OFFSET = "commit_offset"
READ_OFFSET = "read_offset"
EXPIRE_OFFSETS = "expire_offsets"
DELETE_OFFSET = "delete_offset"
PARTITION_PREFIX = b"G"

METADATA_FIELDS: dict[str, dict[str, type]] = {
    JOIN_GROUP: {"group": str, "member_id": str, "client_id": str, "topics": list, "session_timeout_ms": int,
                 "rebalance_timeout_ms": int, "members_max": int, "groups_max": int, "now_ms": int},
    LEAVE_GROUP: {"group": str, "member_id": str, "now_ms": int},
    EXPIRE_MEMBERS: {"group": str, "member_ids": list, "now_ms": int},
    RELEASE_PARTITIONS: {"group": str, "member_id": str, "generation": int, "partitions": list, "now_ms": int},
    DELETE_GROUP: {"group": str, "now_ms": int},
    REGISTER_GROUP: {"group": str, "topics": list, "groups_max": int, "now_ms": int},
    CLASSIC_JOIN: {"group": str, "member_id": str, "client_id": str, "protocol_type": str, "protocols": list,
                   "session_timeout_ms": int, "rebalance_timeout_ms": int, "members_max": int, "groups_max": int,
                   "now_ms": int},
    CLASSIC_COMPLETE_JOIN: {"group": str, "members": list, "now_ms": int},
    CLASSIC_SYNC: {"group": str, "member_id": str, "generation": int, "assignments": list, "now_ms": int},
    CLASSIC_LEAVE: {"group": str, "member_ids": list, "now_ms": int},
}

_PARTITION_FIELDS: dict[str, dict[str, type]] = {
    COMMIT_OFFSET: {"group": str, "member_id": str, "generation": int, "offset": int, "metadata": str,
                    "reset": bool, "now_ms": int},
    DELETE_OFFSET: {"group": str},
    READ_OFFSET: {"group": str},
    EXPIRE_OFFSETS: {"groups": list, "committed_before_ms": int},
}


def _json(command_type: str, **fields) -> bytes:
    return json.dumps({"type": command_type, **fields}, separators=(",", ":"), sort_keys=True).encode()


# ---------------------------------------------------------------------- metadata group
def encode_join_group(*, group: str, member_id: str, client_id: str, topics, session_timeout_ms: int,
                      rebalance_timeout_ms: int, members_max: int, groups_max: int, now_ms: int,
                      protocol: str = "") -> bytes:
    """`protocol`: "consumer" for a member of Kafka's consumer protocol (KIP-848); raftbus's own by default."""
    extra = {"protocol": protocol} if protocol else {}
    return b"J" + _json(JOIN_GROUP, group=group, member_id=member_id, client_id=client_id, topics=list(topics),
                        session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
                        members_max=members_max, groups_max=groups_max, now_ms=now_ms, **extra)


def encode_leave_group(*, group: str, member_id: str, now_ms: int) -> bytes:
    return b"J" + _json(LEAVE_GROUP, group=group, member_id=member_id, now_ms=now_ms)


def encode_expire_members(*, group: str, member_ids, now_ms: int) -> bytes:
    return b"J" + _json(EXPIRE_MEMBERS, group=group, member_ids=sorted(member_ids), now_ms=now_ms)


def encode_release_partitions(*, group: str, member_id: str, generation: int, partitions, now_ms: int) -> bytes:
    return b"J" + _json(RELEASE_PARTITIONS, group=group, member_id=member_id, generation=generation,
                        partitions=[[t, p] for t, p in sorted(partitions)], now_ms=now_ms)


def encode_delete_group(*, group: str, now_ms: int) -> bytes:
    return b"J" + _json(DELETE_GROUP, group=group, now_ms=now_ms)


def encode_register_group(*, group: str, topics, groups_max: int, now_ms: int) -> bytes:
    """Create the group without members holding `topics` (an operator's reset, a restore), or add them to an empty
    group's topics."""
    return b"J" + _json(REGISTER_GROUP, group=group, topics=sorted(set(topics)), groups_max=groups_max,
                        now_ms=now_ms)


# ---------------------------------------------------------------------- Kafka's classic protocol
def encode_classic_join(*, group: str, member_id: str, instance_id: str, client_id: str, client_host: str,
                        protocol_type: str, protocols, session_timeout_ms: int, rebalance_timeout_ms: int,
                        members_max: int, groups_max: int, now_ms: int) -> bytes:
    """`protocols`: (name, metadata bytes) pairs in the member's order of preference."""
    return b"J" + _json(CLASSIC_JOIN, group=group, member_id=member_id, instance_id=instance_id, client_id=client_id,
                        client_host=client_host, protocol_type=protocol_type,
                        protocols=classic_state.protocols_to_json(protocols), session_timeout_ms=session_timeout_ms,
                        rebalance_timeout_ms=rebalance_timeout_ms, members_max=members_max, groups_max=groups_max,
                        now_ms=now_ms)


def encode_classic_complete_join(*, group: str, members, now_ms: int) -> bytes:
    """`members`: (member_id, protocols, session_timeout_ms, rebalance_timeout_ms) of each member that joined, in
    the order they joined."""
    return b"J" + _json(CLASSIC_COMPLETE_JOIN, group=group, now_ms=now_ms, members=[
        {"member_id": m, "protocols": classic_state.protocols_to_json(p), "session_timeout_ms": s,
         "rebalance_timeout_ms": r} for m, p, s, r in members])


def encode_classic_sync(*, group: str, member_id: str, generation: int, assignments, now_ms: int) -> bytes:
    """`assignments`: (member_id, assignment bytes) pairs from the leader."""
    return b"J" + _json(CLASSIC_SYNC, group=group, member_id=member_id, generation=generation, now_ms=now_ms,
                        assignments=[[m, classic_state.b64(a)] for m, a in assignments])


def encode_classic_leave(*, group: str, member_ids, now_ms: int) -> bytes:
    return b"J" + _json(CLASSIC_LEAVE, group=group, member_ids=sorted(member_ids), now_ms=now_ms)


# ---------------------------------------------------------------------- partition groups
def encode_commit_offset(*, group: str, member_id: str, generation: int, offset: int, metadata: str, reset: bool,
                         now_ms: int) -> bytes:
    return PARTITION_PREFIX + _json(COMMIT_OFFSET, group=group, member_id=member_id, generation=generation,
                                    offset=offset, metadata=metadata, reset=reset, now_ms=now_ms)


def encode_read_offset(*, group: str, generation: int = 0) -> bytes:
    if generation:
        return PARTITION_PREFIX + _json(READ_OFFSET, group=group, generation=generation)
    return PARTITION_PREFIX + _json(READ_OFFSET, group=group)


def encode_delete_offset(*, group: str) -> bytes:
    """Forget the group's committed offset here (Kafka's DeleteGroups and OffsetDelete); the generation fence
    stays."""
    return PARTITION_PREFIX + _json(DELETE_OFFSET, group=group)


def encode_expire_offsets(*, groups, committed_before_ms: int) -> bytes:
    """Drop these groups' committed offsets, each only if it was last committed before `committed_before_ms`."""
    return PARTITION_PREFIX + _json(EXPIRE_OFFSETS, groups=sorted(groups), committed_before_ms=committed_before_ms)


def decode_partition_command(command) -> tuple[str, dict]:
    """(type, fields) of a b"G" command; InvalidArgument when malformed or a field has the wrong type."""
    try:
        payload = json.loads(bytes(command[1:]))
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.InvalidArgument(f"group offset command is not JSON: {exc}") from None
    if not isinstance(payload, dict) or payload.get("type") not in _PARTITION_FIELDS:
        raise errors.InvalidArgument("group offset command has no known type")
    kind = payload.pop("type")
    for name, expected in _PARTITION_FIELDS[kind].items():
        value = payload.get(name)
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise errors.InvalidArgument(f"{kind} command needs {name} as {expected.__name__}")
    return kind, payload


commands.register(METADATA_FIELDS, PARTITION_PREFIX, decode_partition_command)
