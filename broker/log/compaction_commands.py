"""The commands of compacted stream partitions (docs/compaction.md), one family with the leading byte b"Y":

    policy      b"Yp" | compacted >B
                the partition keeps a key index from now on (1) or stops (0); switched on over records it already
                holds, the index is built back to the log start by backfill commands first
    backfill    b"Yi" | from_offset >q | to_offset >q
                index the stored batches in [from_offset, to_offset), to_offset being where the index starts
    compact     b"Yk" | now_ms >q | cleaned_offset >q | count >I | count x rewrite
                rewrite = base_offset >q | old_term >Q | new_len >i (-1: the batch is removed) | new value |
                          tombstones >H | tombstones x (offset >q | key_len >H | key)
                each batch still stored with `old_term` (its digest term) is replaced by the new value, or
                removed, and the tombstones it no longer holds leave the key index; `cleaned_offset` (-1: none)
                ends a pass: the records below it are compacted
    conditional b"Yw" | expected_revision >q | a produce command (b"P...", broker/commands.py)
                appended only while the key's latest record is at expected_revision (-1: none, or a tombstone)

The leader plans a compaction off the Raft loop (log/compaction.py) and proposes what it found; every replica
applies the same rewrite to the same batches, so the new bytes are the leader's and every store stays identical.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from raftbus.broker import commands
from raftbus.client import errors

PREFIX = b"Y"
POLICY = "compaction_policy"
BACKFILL = "index_backfill"
COMPACT = "compact"
CONDITIONAL = "conditional_produce"

_B = struct.Struct(">B")
_Q2 = struct.Struct(">qq")
_COMPACT_HEAD = struct.Struct(">qqI")
_REWRITE_HEAD = struct.Struct(">qQi")
_H = struct.Struct(">H")
_TOMBSTONE = struct.Struct(">qH")
_EXPECTED = struct.Struct(">q")


class Backfill(NamedTuple):
    from_offset: int
    to_offset: int


class Rewrite(NamedTuple):
    base_offset: int
    old_term: int
    new_value: bytes | None  # None: the batch is removed
    tombstones: tuple[tuple[int, bytes], ...]  # (offset, key) of the tombstones it no longer holds


class Compact(NamedTuple):
    now_ms: int
    cleaned_offset: int
    rewrites: tuple[Rewrite, ...]


class Conditional(NamedTuple):
    expected_revision: int
    produce: commands.ProduceCommand


def encode_policy(compacted: bool) -> bytes:
    return PREFIX + b"p" + _B.pack(1 if compacted else 0)


def encode_backfill(from_offset: int, to_offset: int) -> bytes:
    return PREFIX + b"i" + _Q2.pack(from_offset, to_offset)


def rewrite_bytes(rewrite: Rewrite) -> int:
    """What one rewrite adds to a compact command."""
    return (_REWRITE_HEAD.size + len(rewrite.new_value or b"") + _H.size
            + sum(_TOMBSTONE.size + len(key) for _, key in rewrite.tombstones))


def encode_compact(now_ms: int, cleaned_offset: int, rewrites) -> bytes:
    parts = [PREFIX, b"k", _COMPACT_HEAD.pack(now_ms, cleaned_offset, len(rewrites))]
    for rewrite in rewrites:
        new = rewrite.new_value
        parts.append(_REWRITE_HEAD.pack(rewrite.base_offset, rewrite.old_term, -1 if new is None else len(new)))
        if new is not None:
            parts.append(new)
        parts.append(_H.pack(len(rewrite.tombstones)))
        for offset, key in rewrite.tombstones:
            parts.append(_TOMBSTONE.pack(offset, len(key)))
            parts.append(key)
    return b"".join(parts)


def encode_conditional(expected_revision: int, produce_command: bytes) -> bytes:
    return PREFIX + b"w" + _EXPECTED.pack(expected_revision) + produce_command


def decode(command) -> tuple[str, object]:
    """(kind, payload) of a b"Y" command; raises a typed error when malformed (commands.decode makes it INVALID)."""
    view = memoryview(command)
    op = bytes(view[1:2])
    try:
        if op == b"p":
            if len(view) != 3:
                raise errors.InvalidArgument("policy command is malformed")
            return POLICY, bool(view[2])
        if op == b"i":
            if len(view) != 2 + _Q2.size:
                raise errors.InvalidArgument("backfill command is malformed")
            return BACKFILL, Backfill(*_Q2.unpack_from(view, 2))
        if op == b"k":
            return COMPACT, _decode_compact(view)
        if op == b"w":
            (expected,) = _EXPECTED.unpack_from(view, 2)
            return CONDITIONAL, Conditional(expected, commands.decode_produce(view[2 + _EXPECTED.size:]))
    except struct.error:
        raise errors.InvalidArgument(f"compaction command of {len(view)} bytes is truncated") from None
    raise errors.InvalidArgument(f"unknown compaction command {op!r}")


def _decode_compact(view: memoryview) -> Compact:
    now_ms, cleaned_offset, count = _COMPACT_HEAD.unpack_from(view, 2)
    pos = 2 + _COMPACT_HEAD.size
    rewrites = []
    for _ in range(count):
        base_offset, old_term, new_len = _REWRITE_HEAD.unpack_from(view, pos)
        pos += _REWRITE_HEAD.size
        new_value = None
        if new_len >= 0:
            if pos + new_len > len(view):
                raise errors.InvalidArgument("compact command is truncated")
            new_value, pos = bytes(view[pos:pos + new_len]), pos + new_len
        (tombstone_count,) = _H.unpack_from(view, pos)
        pos += _H.size
        tombstones = []
        for _ in range(tombstone_count):
            offset, key_len = _TOMBSTONE.unpack_from(view, pos)
            pos += _TOMBSTONE.size
            if pos + key_len > len(view):
                raise errors.InvalidArgument("compact command is truncated")
            tombstones.append((offset, bytes(view[pos:pos + key_len])))
            pos += key_len
        rewrites.append(Rewrite(base_offset, old_term, new_value, tuple(tombstones)))
    if pos != len(view):
        raise errors.InvalidArgument(f"compact command has {len(view) - pos} bytes after its rewrites")
    return Compact(now_ms, cleaned_offset, tuple(rewrites))


commands.register({}, PREFIX, decode)
