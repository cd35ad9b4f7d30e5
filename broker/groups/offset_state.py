"""Committed offsets of consumer groups, kept in each partition's own state machine so they move with the data.

Pure: reached only through the transaction the partition state machine hands in.

Table:
    offsets   group name (utf-8) -> offset >q | generation >q | commit_time_ms >q | highest_generation >q |
                                    metadata (utf-8, the rest of the value)

Expiry: a leader proposes to drop the offsets of groups that no longer exist once they were last committed
more than `offsets_retention_ms` ago; the command names the groups and the cut-off, and each entry is dropped
only if it is still older than the cut-off when applied (a commit in between keeps it).

Fence: a new owner reads its start position through the log (`read_offset` with its generation), which raises
the group's highest generation here before the owner has committed anything. A group that never committed here
then gets a fence-only entry (offset -1, commit time 0: reads see no committed offset, and expiry treats it as
old). So the partition's own state orders "the new owner started" before any later commit of an older owner.

Rules of a commit (each refusal is a typed error value and writes nothing):
- a generation below the highest this partition has seen for the group (by a commit or an owner's read) is
  stale: a member that lost the partition cannot overwrite its new owner's progress, even through a broker
  whose metadata replica lags and still believes it owns the partition;
- the offset never moves backwards unless the commit is an explicit reset (a seek);
- the offset is at most the high watermark (the end of what has been appended before the commit).
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from raftbus.client import errors

OFFSETS = "offsets"
_ENTRY = struct.Struct(">qqqq")


class CommittedOffset(NamedTuple):
    offset: int
    generation: int
    commit_time_ms: int
    highest_generation: int
    metadata: str


def _key(group: str) -> bytes:
    return group.encode()


_FENCE_ONLY = -1  # the offset of an entry that only carries a highest generation


def _load_entry(txn, group: str) -> CommittedOffset | None:
    raw = txn.get(OFFSETS, _key(group))
    if raw is None:
        return None
    offset, generation, commit_time_ms, highest = _ENTRY.unpack_from(raw)
    return CommittedOffset(offset, generation, commit_time_ms, highest, bytes(raw[_ENTRY.size:]).decode())


def _store(txn, group: str, entry: CommittedOffset) -> None:
    txn.put(OFFSETS, _key(group), _ENTRY.pack(*entry[:4]) + entry.metadata.encode())


def load(txn, group: str) -> CommittedOffset | None:
    """The group's committed offset here; None when it never committed (or only a new owner's fence is there)."""
    entry = _load_entry(txn, group)
    return None if entry is None or entry.offset == _FENCE_ONLY else entry


def highest_generation(txn, group: str) -> int:
    """The highest generation this partition has seen for the group (by a commit or a new owner's read); 0 if none."""
    entry = _load_entry(txn, group)
    return 0 if entry is None else entry.highest_generation


def read(txn, payload: dict) -> CommittedOffset | None | errors.RaftbusError:
    """The committed offset, read by the log; with a generation (a new owner's first read) it first raises the
    group's highest generation here, so commits from older generations are refused from now on."""
    generation = payload.get("generation", 0)
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        return errors.InvalidArgument("read_offset generation must be an int >= 0")
    group = payload["group"]
    entry = _load_entry(txn, group)
    if generation and (entry is None or generation > entry.highest_generation):
        fenced = (entry or CommittedOffset(_FENCE_ONLY, 0, 0, 0, ""))._replace(highest_generation=generation)
        _store(txn, group, fenced)
    return load(txn, group)


def commit(txn, high_watermark: int, payload: dict):
    """Store the group's committed offset; returns the stored CommittedOffset or a typed error value."""
    group, offset, generation = payload["group"], payload["offset"], payload["generation"]
    stored = _load_entry(txn, group)
    if offset < 0:
        return errors.InvalidArgument(f"offset {offset} must be >= 0")
    if offset > high_watermark:
        return errors.OffsetOutOfRange(f"offset {offset} is beyond the high watermark {high_watermark}")
    if stored is not None and generation < stored.highest_generation:
        return errors.StaleGeneration(f"group {group!r} already committed here at generation "
                                      f"{stored.highest_generation}; this commit is from generation {generation}")
    if stored is not None and offset < stored.offset and not payload["reset"]:
        return errors.OffsetRegression(f"group {group!r} committed {stored.offset}; {offset} would move it back "
                                       "(seek first to rewind)")
    highest = generation if stored is None else max(stored.highest_generation, generation)
    entry = CommittedOffset(offset, generation, payload["now_ms"], highest, payload["metadata"])
    _store(txn, group, entry)
    return entry


def delete(txn, payload: dict) -> bool:
    """Forget the group's committed offset (Kafka's DeleteGroups, OffsetDelete): reads see none from now on.
    Its highest generation stays as a fence-only entry, so a late commit of an older generation is still refused;
    the entry expires like an old commit. True when an offset was there."""
    group = payload["group"]
    entry = _load_entry(txn, group)
    if entry is None or entry.offset == _FENCE_ONLY:
        return False
    _store(txn, group, CommittedOffset(_FENCE_ONLY, 0, 0, entry.highest_generation, ""))
    return True


def committed_before(txn, cutoff_ms: int) -> list[str]:
    """Groups whose offset here was last committed before `cutoff_ms`."""
    return [bytes(key).decode() for key, raw in txn.items(OFFSETS) if _ENTRY.unpack_from(raw)[2] < cutoff_ms]


def expire(txn, payload: dict) -> list[str] | errors.RaftbusError:
    """Drop the named groups' offsets that are still older than the cut-off; returns the groups dropped."""
    groups, cutoff_ms = payload["groups"], payload["committed_before_ms"]
    if not all(isinstance(group, str) for group in groups):
        return errors.InvalidArgument("expire_offsets needs group names as strings")
    dropped = []
    for group in groups:
        stored = _load_entry(txn, group)
        if stored is not None and stored.commit_time_ms < cutoff_ms:
            txn.delete(OFFSETS, _key(group))
            dropped.append(group)
    return dropped
