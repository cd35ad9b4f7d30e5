"""A Raft group's configuration (`Membership`): its voters and learners, changed one step at a time through the
group's own log.

A configuration change is an entry of raftbus's own type in the group's log (never pysyncobj's pickled
membership entry, which stays a no-op). It carries the WHOLE configuration it installs and the index of the
configuration it was derived from (`based_on`): every replica applies it on commit, in log order, and only if
`based_on` is the configuration it holds (otherwise it is a stale, concurrent proposal and changes nothing), so
all replicas decide alike and replaying a journal or a snapshot tail rebuilds the same configuration.

One change at a time (etcd's single-step rule): the leader proposes only once it has applied an entry of its own
term and no other configuration entry is waiting to be applied; each step adds or removes one voter, or adds,
promotes or removes one learner. A learner receives the log but neither votes nor counts for the commit.

Wire form of the payload (after the entry type byte): `MAGIC` + JSON {"based_on", "voters", "learners"}.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from raftbus.client import errors

MAGIC = b"RBCFG1"
ENTRY_TYPE = 16  # the first byte of a configuration entry (pysyncobj's own types are 0-3)
MEMBERS_MAX = 64  # far above any replication factor; bounds what a configuration entry may carry


class ConfigurationCodecError(ValueError):
    """Bytes that are not a raftbus configuration entry."""


@dataclass(frozen=True)
class Membership:
    """A configuration: who votes, who only learns, and the Raft index of the entry that installed it (0: the
    configuration the group was created with)."""

    voters: frozenset
    learners: frozenset = frozenset()
    index: int = 0

    @classmethod
    def of(cls, voters, learners=(), index: int = 0) -> "Membership":
        return cls(frozenset(int(v) for v in voters), frozenset(int(v) for v in learners), int(index))

    @property
    def members(self) -> frozenset:
        return self.voters | self.learners

    def is_voter(self, node_id: int) -> bool:
        return node_id in self.voters

    def to_dict(self) -> dict:
        return {"voters": sorted(self.voters), "learners": sorted(self.learners), "index": self.index}

    # ------------------------------------------------------------------ one step each
    def add_learner(self, node_id: int) -> "Membership":
        if node_id in self.members:
            raise errors.InvalidReplicas(f"broker {node_id} is already a member of the group")
        return self._next(self.voters, self.learners | {node_id})

    def promote(self, node_id: int) -> "Membership":
        if node_id not in self.learners:
            raise errors.UnknownBroker(f"broker {node_id} is not a learner of the group")
        return self._next(self.voters | {node_id}, self.learners - {node_id})

    def demote(self, node_id: int) -> "Membership":
        """A voter becomes a learner: it stops voting but keeps receiving the log (so it learns it was demoted)."""
        if node_id not in self.voters:
            raise errors.UnknownBroker(f"broker {node_id} is not a voter of the group")
        if self.voters == {node_id}:
            raise errors.InvalidReplicas(f"broker {node_id} is the group's last voter")
        return self._next(self.voters - {node_id}, self.learners | {node_id})

    def remove(self, node_id: int) -> "Membership":
        if node_id not in self.members:
            raise errors.UnknownBroker(f"broker {node_id} is not a member of the group")
        if self.voters == {node_id}:
            raise errors.InvalidReplicas(f"broker {node_id} is the group's last voter")
        return self._next(self.voters - {node_id}, self.learners - {node_id})

    def _next(self, voters, learners) -> "Membership":
        if len(voters) + len(learners) > MEMBERS_MAX:
            raise errors.InvalidReplicas(f"a group has at most {MEMBERS_MAX} members")
        return Membership(frozenset(voters), frozenset(learners), self.index)


def encode_change(target: Membership, based_on: int) -> bytes:
    """The entry (type byte included) that installs `target` over the configuration installed at `based_on`."""
    body = {"based_on": based_on, "voters": sorted(target.voters), "learners": sorted(target.learners)}
    return bytes([ENTRY_TYPE]) + MAGIC + json.dumps(body, separators=(",", ":")).encode()


def decode_change(entry: bytes) -> tuple[int, frozenset, frozenset]:
    """(based_on, voters, learners) of a configuration entry (type byte included); ConfigurationCodecError else."""
    if not entry or entry[0] != ENTRY_TYPE or entry[1:1 + len(MAGIC)] != MAGIC:
        raise ConfigurationCodecError("not a raftbus configuration entry")
    try:
        body = json.loads(entry[1 + len(MAGIC):])
    except ValueError as exc:
        raise ConfigurationCodecError(f"undecodable configuration entry: {exc}") from None
    if type(body) is not dict or set(body) != {"based_on", "voters", "learners"}:
        raise ConfigurationCodecError("a configuration entry has the wrong fields")
    voters, learners, based_on = body["voters"], body["learners"], body["based_on"]
    if type(based_on) is not int or not _ids(voters) or not _ids(learners):
        raise ConfigurationCodecError("a configuration entry's fields have the wrong types")
    if not voters or set(voters) & set(learners) or len(voters) + len(learners) > MEMBERS_MAX:
        raise ConfigurationCodecError("a configuration entry's voters and learners are not a configuration")
    return based_on, frozenset(voters), frozenset(learners)


def _ids(value) -> bool:
    return type(value) is list and all(type(v) is int and v >= 0 for v in value)


def is_change(entry: bytes) -> bool:
    return bool(entry) and entry[0] == ENTRY_TYPE
