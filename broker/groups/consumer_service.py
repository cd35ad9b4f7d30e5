"""Kafka's consumer protocol (KIP-848, ConsumerGroupHeartbeat) on raftbus's own groups, on the controller.

KIP-848 moved the assignment to the broker and made it incremental, which is what raftbus's groups always did: a
member's heartbeat carries its subscription and the partitions it owns; the broker's sticky assignor computes
the target (rules.py); a partition leaves its owner before anyone else gets it. So a group of this protocol is a
raftbus group whose members are Kafka consumers ("consumer" protocol), driven by the same commands:

- epoch 0 joins (`join_group` with the member's own id; a v0 member gets one from the broker), a changed
  subscription joins again, epoch -1 (or -2, a static member's) leaves (`leave_group`);
- a member stops owning what it no longer reports (`release_partitions` of its revoked partitions), so they go to
  their target member;
- the answer's assignment is what the member may own now: its target, less what another member has not released
  yet (those arrive in a later heartbeat); its epoch is the group's generation, the fence of its commits (a
  member commits only partitions it owns, since that generation or earlier) and of its offset reads.

Heartbeats are not Raft writes: their times go to the GroupService's table, whose expiry (the controller's
periodic task) removes silent members as it removes raftbus's own.
"""
from __future__ import annotations

import asyncio
import base64
import uuid
from typing import NamedTuple

from raftbus.client import errors

from raftbus.broker.context import BrokerContext
from raftbus.broker.groups import commands as group_commands
from raftbus.broker.groups import rules
from raftbus.broker.groups.heartbeats import HeartbeatTable
from raftbus.broker.groups.settings import GroupSettings

JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2


class ConsumerHeartbeat(NamedTuple):
    group: str
    member_id: str
    member_epoch: int
    client_id: str
    rebalance_timeout_ms: int
    topics: tuple[str, ...] | None  # None: unchanged since the last heartbeat
    owned: tuple[tuple[str, int], ...] | None  # None: unchanged


class ConsumerAnswer(NamedTuple):
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: tuple[tuple[str, int], ...] | None  # None: unchanged since the last answer


def new_member_id() -> str:
    """Kafka's form of a member id: a random UUID in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class ConsumerProtocolService:
    def __init__(self, context: BrokerContext, settings: GroupSettings, heartbeats: HeartbeatTable):
        self.context = context
        self.settings = settings
        self.heartbeats = heartbeats  # GroupService's: its expiry removes silent members
        self._sent: dict[tuple[str, str], tuple] = {}  # (group, member) -> the assignment last answered

    async def heartbeat(self, beat: ConsumerHeartbeat) -> ConsumerAnswer:
        self.context.require_controller()
        rules.validate_group_name(beat.group)
        if beat.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return await self._leave(beat)
        if beat.member_epoch == JOIN_EPOCH:
            group, member_id = await self._join(beat)
        else:
            group, member_id = await self._beat(beat)
        self.heartbeats.beat(beat.group, member_id, self.context.clock.now_ms())
        assignment = self.assignment(group, member_id)
        key = (beat.group, member_id)
        changed = beat.member_epoch == JOIN_EPOCH or self._sent.get(key) != assignment
        if len(self._sent) >= self.settings.groups_max and key not in self._sent:
            self._prune()
        self._sent[key] = assignment
        return ConsumerAnswer(member_id, group.generation, self.interval_ms(), assignment if changed else None)

    def interval_ms(self) -> int:
        return self.settings.heartbeat_interval_ms

    @staticmethod
    def assignment(group: rules.ConsumerGroup, member_id: str) -> tuple[tuple[str, int], ...]:
        """What the member may own now: its target less what another member still owns."""
        target = set(group.members[member_id].target)
        return tuple(sorted(tp for tp in group.owned_by(member_id) if tp in target))

    async def _join(self, beat: ConsumerHeartbeat):
        if beat.topics is None:
            raise errors.InvalidArgument("a member joining (epoch 0) names its subscribed topics")
        member_id = beat.member_id or new_member_id()
        self._check_topics(beat.topics)
        group = await self._commit(self._join_command(beat, member_id))
        return group, member_id

    async def _beat(self, beat: ConsumerHeartbeat):
        group = self.context.metadata_sm.group(beat.group)
        if group is None or group.protocol != rules.CONSUMER or beat.member_id not in group.members:
            raise errors.UnknownMember(f"member {beat.member_id!r} is not in group {beat.group!r}; join again")
        if beat.member_epoch > group.generation:
            raise errors.StaleGeneration(f"member epoch {beat.member_epoch} is ahead of group {beat.group!r}'s "
                                         f"{group.generation}")
        member = group.members[beat.member_id]
        if beat.topics is not None and tuple(sorted(set(beat.topics))) != member.topics:
            self._check_topics(beat.topics)
            group = await self._commit(self._join_command(beat, beat.member_id))
        if beat.owned is not None:
            reported = set(beat.owned)
            released = [tp for tp in group.revoking(beat.member_id) if tp not in reported]
            if released:
                group = await self._commit(group_commands.encode_release_partitions(
                    group=beat.group, member_id=beat.member_id, generation=group.generation, partitions=released,
                    now_ms=self.context.clock.now_ms()))
        return group, beat.member_id

    async def _leave(self, beat: ConsumerHeartbeat) -> ConsumerAnswer:
        group = self.context.metadata_sm.group(beat.group)
        if group is None or group.protocol != rules.CONSUMER or beat.member_id not in group.members:
            raise errors.UnknownMember(f"member {beat.member_id!r} is not in group {beat.group!r}")
        await self._commit(group_commands.encode_leave_group(group=beat.group, member_id=beat.member_id,
                                                             now_ms=self.context.clock.now_ms()))
        self._sent.pop((beat.group, beat.member_id), None)
        return ConsumerAnswer(beat.member_id, beat.member_epoch, self.interval_ms(), None)

    def _join_command(self, beat: ConsumerHeartbeat, member_id: str) -> bytes:
        s = self.settings
        rebalance_ms = beat.rebalance_timeout_ms if 0 < beat.rebalance_timeout_ms <= s.rebalance_timeout_max_ms \
            else s.rebalance_timeout_ms
        return group_commands.encode_join_group(
            group=beat.group, member_id=member_id, client_id=rules.printable_client_id(beat.client_id), topics=beat.topics,
            session_timeout_ms=s.session_timeout_ms, rebalance_timeout_ms=rebalance_ms,
            members_max=s.group_members_max, groups_max=s.groups_max, now_ms=self.context.clock.now_ms(),
            protocol=rules.CONSUMER)

    def _check_topics(self, topics) -> None:
        if len(set(topics)) > self.settings.group_topics_per_member_max:
            raise errors.InvalidArgument(f"{len(set(topics))} topics exceed group_topics_per_member_max="
                                         f"{self.settings.group_topics_per_member_max}")

    def _prune(self) -> None:
        """Forget what was answered to members that are gone (bounds the memory by the groups' members)."""
        groups = self.context.metadata_sm.groups()
        self._sent = {(g, m): a for (g, m), a in self._sent.items() if g in groups and m in groups[g].members}

    async def _commit(self, command: bytes) -> rules.ConsumerGroup:
        future = self.context.metadata_group.submit(command)
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), self.context.commit_timeout_s)
        except asyncio.TimeoutError:
            raise errors.RequestTimedOut(f"not committed within {self.context.commit_timeout_s:.1f} s") from None
        if isinstance(result, errors.RaftbusError):
            raise result
        return result

