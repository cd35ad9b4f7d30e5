"""Consumer-group membership on the controller: join, heartbeat, sync, leave, expiry. The rules, not gRPC.

Joins, releases, leaves and expiries are metadata commands stamped with the controller's time. Heartbeats are
not: the controller keeps their times in memory (HeartbeatTable), and a periodic task on the loop thread
(`expire_due`) submits an expiry for members past their session timeout, or holding revoked partitions past
their rebalance timeout. A heartbeat long-polls: it answers as soon as the group's generation moves past the
member's, so members learn a new assignment at once instead of at their next heartbeat.
"""
from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass

from raftbus.client import errors

from raftbus.broker.groups import commands as group_commands
from raftbus.broker.groups import rules
from raftbus.broker.groups.settings import GroupSettings
from raftbus.broker.context import METADATA_GROUP, BrokerContext, wait_result
from raftbus.broker.groups.heartbeats import HeartbeatTable

log = logging.getLogger(__name__)

HEARTBEATS_PER_SESSION_MIN = 3


@dataclass(frozen=True)
class JoinAnswer:
    member_id: str
    generation: int
    session_timeout_ms: int
    rebalance_timeout_ms: int
    heartbeat_interval_ms: int


@dataclass(frozen=True)
class AssignmentView:
    """What one member may consume at `generation`, what it must give up, and what it is still waiting for."""

    generation: int
    owned: tuple[rules.TopicPartition, ...]
    revoking: tuple[rules.TopicPartition, ...]
    pending: tuple[rules.TopicPartition, ...]


def assignment_view(group: rules.ConsumerGroup, member_id: str) -> AssignmentView:
    return AssignmentView(group.generation, group.owned_by(member_id), group.revoking(member_id),
                          group.pending(member_id))


class GroupService:
    def __init__(self, context: BrokerContext, settings: GroupSettings):
        self.context = context
        self.settings = settings
        self.heartbeats = HeartbeatTable()
        self._changed = threading.Condition()
        self._waiting = 0
        self._in_flight: dict[str, object] = {}  # group -> future of its pending expiry or deletion

    # ------------------------------------------------------------------ membership (controller only)
    def join(self, group: str, *, member_id: str, client_id: str, topics, session_timeout_ms: int,
             rebalance_timeout_ms: int) -> JoinAnswer:
        s = self.settings
        rules.validate_group_name(group)
        rules.validate_member_id(member_id)
        rules.validate_member_id(client_id, "client_id", rules.CLIENT_ID_BYTES_MAX)
        topics = self._check_topics(topics)
        session_timeout_ms = session_timeout_ms or s.session_timeout_ms
        rebalance_timeout_ms = rebalance_timeout_ms or s.rebalance_timeout_ms
        if not s.session_timeout_min_ms <= session_timeout_ms <= s.session_timeout_max_ms:
            raise errors.InvalidSessionTimeout(
                f"session_timeout_ms {session_timeout_ms} is outside [{s.session_timeout_min_ms}, "
                f"{s.session_timeout_max_ms}]")
        if not 1 <= rebalance_timeout_ms <= s.rebalance_timeout_max_ms:
            raise errors.InvalidSessionTimeout(
                f"rebalance_timeout_ms {rebalance_timeout_ms} is outside [1, {s.rebalance_timeout_max_ms}]")
        self.context.require_controller()
        if member_id:
            known = self.context.metadata_sm.group(group)
            if known is None or member_id not in known.members:
                raise errors.UnknownMember(f"member {member_id!r} is not in group {group!r}; join without an id")
        else:
            member_id = f"{client_id or 'consumer'}-{uuid.uuid4().hex}"
        now_ms = self.context.clock.now_ms()
        command = group_commands.encode_join_group(group=group, member_id=member_id, client_id=client_id, topics=topics,
                                       session_timeout_ms=session_timeout_ms,
                                       rebalance_timeout_ms=rebalance_timeout_ms, members_max=s.group_members_max,
                                       groups_max=s.groups_max, now_ms=now_ms)
        joined = self._submit(command)
        self.heartbeats.beat(group, member_id, now_ms)
        log.info("member joined", extra={"group": group, "member": member_id, "generation": joined.generation})
        interval_ms = min(s.heartbeat_interval_ms, session_timeout_ms // HEARTBEATS_PER_SESSION_MIN)
        return JoinAnswer(member_id, joined.generation, session_timeout_ms, rebalance_timeout_ms, interval_ms)

    def heartbeat(self, group: str, member_id: str, generation: int, max_wait_ms: int = 0) -> tuple[int, bool]:
        """(the group's generation, whether it differs from the member's); waits up to max_wait_ms for a change."""
        self.context.require_controller()
        current = self._member_group(group, member_id, generation)
        self.heartbeats.beat(group, member_id, self.context.clock.now_ms())
        if current.generation == generation and max_wait_ms > 0:
            current = self._wait_for_change(group, member_id, generation,
                                            min(max_wait_ms, self.settings.heartbeat_interval_ms))
        return current.generation, current.generation != generation

    def sync(self, group: str, member_id: str, generation: int, released=()) -> AssignmentView:
        """The member's assignment; with `released`, first hand those revoked partitions to their new owners."""
        self.context.require_controller()
        current = self._member_group(group, member_id, generation)
        now_ms = self.context.clock.now_ms()
        self.heartbeats.beat(group, member_id, now_ms)
        released = [(t, int(p)) for t, p in released]
        if released:
            owned = current.owned_by(member_id)
            if len(released) > len(owned):
                raise errors.InvalidArgument(f"released {len(released)} partitions; the member owns {len(owned)}")
            current = self._submit(group_commands.encode_release_partitions(
                group=group, member_id=member_id, generation=generation, partitions=released, now_ms=now_ms))
        return assignment_view(current, member_id)

    def register(self, group: str, topics) -> rules.ConsumerGroup:
        """The group, created without members holding `topics` when it does not exist (an operator's offset reset, a
        restore: Kafka's tools create a group's offsets the same way), or with `topics` added when it is empty; a
        read when nothing would change."""
        rules.validate_group_name(group)
        topics = self._check_topics(topics)
        self.context.require_controller()
        found = self.context.metadata_sm.group(group)
        if found is not None and (found.members or set(topics) <= set(found.topics)):
            return found
        changed = self._submit(group_commands.encode_register_group(
            group=group, topics=topics, groups_max=self.settings.groups_max, now_ms=self.context.clock.now_ms()))
        log.info("group registered", extra={"group": group, "topics": topics})
        return changed

    def leave(self, group: str, member_id: str) -> None:
        self.context.require_controller()
        self._submit(group_commands.encode_leave_group(group=group, member_id=member_id, now_ms=self.context.clock.now_ms()))
        log.info("member left", extra={"group": group, "member": member_id})

    def delete_group(self, group: str, forget_offset) -> None:
        """Delete an empty group and its committed offsets (Kafka's DeleteGroups): `forget_offset(group, topic,
        partition)` forgets each offset on its partition's leader, then the group goes. GroupNotEmpty while it
        has members, UnknownGroup when there is none."""
        rules.validate_group_name(group)
        self.context.require_controller()
        found = self.context.metadata_sm.group(group)
        if found is None:
            raise errors.UnknownGroup(f"group {group!r} does not exist")
        if found.members:
            raise errors.GroupNotEmpty(f"group {group!r} has {len(found.members)} member(s)")
        for name in found.topics:
            topic = self.context.metadata_sm.topic(name)
            for partition in range(len(topic.partitions) if topic is not None and topic.kind == "stream" else 0):
                forget_offset(group, name, partition)
        self._submit(group_commands.encode_delete_group(group=group, now_ms=self.context.clock.now_ms()))
        log.info("group deleted", extra={"group": group})

    # ------------------------------------------------------------------ reads (any broker)
    def list_groups(self) -> list[rules.ConsumerGroup]:
        groups = self.context.metadata_sm.groups()
        return [groups[name] for name in sorted(groups)]

    def describe_group(self, group: str) -> rules.ConsumerGroup:
        rules.validate_group_name(group)
        found = self.context.metadata_sm.group(group)
        if found is None:
            raise errors.UnknownGroup(f"group {group!r} does not exist")
        return found

    # ------------------------------------------------------------------ loop thread
    def on_metadata_event(self, group) -> None:
        """An applied command or leadership change of a group: wake heartbeats waiting for a new generation."""
        if group.group_id == METADATA_GROUP:
            with self._changed:
                self._changed.notify_all()

    def expire_due(self) -> None:
        """On the controller: submit expiries of overdue members and deletion of long-empty groups (no waiting)."""
        if not self.context.metadata_group.is_leader:
            self.heartbeats.lost_leadership()
            return
        now_ms = self.context.clock.now_ms()
        since_ms = self.heartbeats.leading_since(now_ms)
        groups = self.context.metadata_sm.groups()
        for name, group in groups.items():
            pending = self._in_flight.get(name)
            if pending is not None and not pending.done():
                continue
            command = self._housekeeping_command(group, now_ms, since_ms)
            if command is not None:
                self._in_flight[name] = self.context.metadata_group.submit(command)
        self._in_flight = {g: f for g, f in self._in_flight.items() if g in groups}
        self.heartbeats.keep_only({name: set(g.members) for name, g in groups.items()})

    def _housekeeping_command(self, group: rules.ConsumerGroup, now_ms: int, since_ms: int) -> bytes | None:
        # a classic group's members are the Kafka port's coordinator's to expire (broker/groups/coordinator.py)
        doomed = [] if group.protocol == rules.CLASSIC else \
            rules.overdue_members(group, self.heartbeats.last_of(group.name), since_ms, now_ms)
        if doomed:
            log.info("members expired", extra={"group": group.name, "members": doomed})
            return group_commands.encode_expire_members(group=group.name, member_ids=doomed, now_ms=now_ms)
        empty_for_ms = now_ms - max(group.empty_since_ms, since_ms)
        if not group.members and group.empty_since_ms >= 0 and empty_for_ms > self.settings.group_empty_retention_ms:
            log.info("empty group deleted", extra={"group": group.name})
            return group_commands.encode_delete_group(group=group.name, now_ms=now_ms)
        return None

    # ------------------------------------------------------------------ helpers
    def _check_topics(self, topics) -> list[str]:
        topics = sorted(set(topics))
        if not topics:
            raise errors.InvalidArgument("a member subscribes to at least one topic")
        if len(topics) > self.settings.group_topics_per_member_max:
            raise errors.InvalidArgument(f"{len(topics)} topics exceed group_topics_per_member_max="
                                         f"{self.settings.group_topics_per_member_max}")
        for name in topics:
            topic = self.context.topic(name)
            if topic.kind != "stream":
                raise errors.WrongTopicKind(f"topic {name!r} is a {topic.kind} topic; groups consume stream topics")
        return topics

    def _member_group(self, group: str, member_id: str, generation: int) -> rules.ConsumerGroup:
        applied_index = self.context.metadata_sm.applied_index()
        if generation > applied_index:
            raise errors.MetadataBehind(f"generation {generation} is ahead of this controller's metadata "
                                        f"({applied_index}); retry")
        return rules.require_member(self.context.metadata_sm.group(group), group, member_id)

    def _wait_for_change(self, group: str, member_id: str, generation: int, wait_ms: int) -> rules.ConsumerGroup:
        sm, metadata_group = self.context.metadata_sm, self.context.metadata_group

        def moved() -> bool:
            current = sm.group(group)
            return (current is None or current.generation != generation or member_id not in current.members
                    or not metadata_group.is_leader)

        with self._changed:
            if self._waiting < self.settings.group_heartbeat_waiters_max:
                self._waiting += 1
                try:
                    self._changed.wait_for(moved, wait_ms / 1000)
                finally:
                    self._waiting -= 1
        return rules.require_member(sm.group(group), group, member_id)

    def _submit(self, command: bytes) -> rules.ConsumerGroup:
        future = self.context.metadata_group.submit(command)
        return wait_result(future, self.context.commit_timeout_s)
