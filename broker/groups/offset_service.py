"""Committed offsets, lag and fetch fencing on a partition's leader: the rules, independent of gRPC.

A member's fetch or commit is checked against this broker's metadata replica (`check_member`). That replica
may lag the controller; since a generation is a metadata log index, a replica that has not applied the
member's generation yet says so (MetadataBehind, retriable) instead of judging with old knowledge. The partition
state machine adds its own fence: it refuses generations below the highest it has seen for the group.
"""
from __future__ import annotations

from dataclasses import dataclass

from raftbus.client import errors

from raftbus.broker.groups import classic
from raftbus.broker.groups import commands as group_commands
from raftbus.broker.groups import rules
from raftbus.broker.groups.offset_state import CommittedOffset
from raftbus.broker.groups.settings import GroupSettings
from raftbus.broker.context import BrokerContext, wait_result


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: CommittedOffset | None
    log_start_offset: int
    high_watermark: int
    lag_records: int  # -1 without a committed offset
    lag_ms: int       # age of the oldest unconsumed record; 0 when caught up; -1 without a committed offset


def check_member(context: BrokerContext, group: str, member_id: str, generation: int, topic: str,
                 partition: int) -> None:
    """Raise unless the member owns (topic, partition) at `generation` by this broker's metadata replica."""
    applied_index = context.metadata_sm.applied_index()  # first: the group read next is at least this new
    rules.check_owner(context.metadata_sm.group(group), applied_index, group, member_id, generation,
                      (topic, partition))


def lag_of(state_machine, committed: CommittedOffset | None, now_ms: int) -> tuple[int, int]:
    """(records, ms) from the committed offset to the high watermark; (-1, -1) without a committed offset."""
    if committed is None:
        return -1, -1
    log_start, high_watermark = state_machine.offsets()
    position = max(committed.offset, log_start)
    if position >= high_watermark:
        return 0, 0
    appended_ms = state_machine.append_time_ms_at(position)
    return high_watermark - position, 0 if appended_ms is None else max(0, now_ms - appended_ms)


class OffsetService:
    def __init__(self, context: BrokerContext, settings: GroupSettings):
        self.context = context
        self.settings = settings

    def commit(self, group: str, *, member_id: str, generation: int, topic: str, partition: int, offset: int,
               metadata: str = "", reset: bool = False) -> CommittedOffset:
        """Store the group's offset for the partition; answers once it is committed on a majority."""
        rules.validate_group_name(group)
        if offset < 0:
            raise errors.InvalidArgument(f"offset {offset} must be >= 0")
        if len(metadata.encode()) > self.settings.offset_metadata_bytes_max:
            raise errors.InvalidArgument(
                f"offset metadata exceeds offset_metadata_bytes_max={self.settings.offset_metadata_bytes_max}")
        replica = self.context.leader_replica(topic, partition, kind="stream")
        generation = self._check_commit(replica, group, member_id, generation, topic, partition)
        command = group_commands.encode_commit_offset(group=group, member_id=member_id, generation=generation, offset=offset,
                                          metadata=metadata, reset=reset, now_ms=self.context.clock.now_ms())
        return wait_result(replica.group.submit(command), self.context.commit_timeout_s)

    def _check_commit(self, replica, group: str, member_id: str, generation: int, topic: str,
                      partition: int) -> int:
        """The generation the commit carries into the partition, once this broker's metadata replica allows it.

        Members of raftbus's groups and of Kafka's consumer protocol must own the partition (check_member); a
        classic group's member must be at its group's generation, as Kafka's coordinator decides (the coordinator
        checked first and forwarded the commit here; this replica checks again, so a deposed coordinator cannot
        let an old generation through once this broker knows the new one). A commit without member and
        generation (-1: Kafka's admin tools, consumers that assign themselves partitions) is allowed while the
        group has no members, under the highest generation the partition has seen for it."""
        applied_index = self.context.metadata_sm.applied_index()  # first: the group read next is at least this new
        found = self.context.metadata_sm.group(group)
        if (found is not None and found.protocol == rules.CLASSIC) or (generation < 0 and not member_id):
            classic.check_commit(found, applied_index, group, member_id, generation)
            return generation if generation >= 0 else replica.state_machine.highest_generation(group)
        rules.check_owner(found, applied_index, group, member_id, generation, (topic, partition))
        return generation

    def delete(self, group: str, *, topic: str, partition: int) -> bool:
        """Forget the group's committed offset of the partition (Kafka's DeleteGroups and OffsetDelete); refused
        while members of the group consume the topic (GroupSubscribedToTopic). True when there was one."""
        rules.validate_group_name(group)
        replica = self.context.leader_replica(topic, partition, kind="stream")
        found = self.context.metadata_sm.group(group)
        if found is not None and any(topic in m.topics for m in found.members.values()):
            raise errors.GroupSubscribedToTopic(f"members of group {group!r} consume topic {topic!r}")
        return wait_result(replica.group.submit(group_commands.encode_delete_offset(group=group)),
                           self.context.commit_timeout_s)

    def reset(self, group: str, *, topic: str, partition: int, offset: int) -> CommittedOffset:
        """An operator sets the group's offset for the partition, backwards too; only while the group has no
        members (GroupNotEmpty), between the log start and the high watermark (OffsetOutOfRange). The commit
        carries the highest generation the partition has seen for the group, so a member that joined and
        committed in the meantime makes it StaleGeneration instead of being overwritten."""
        rules.validate_group_name(group)
        replica = self.context.leader_replica(topic, partition, kind="stream")
        members = self.context.metadata_sm.group(group)
        if members is not None and members.members:
            raise errors.GroupNotEmpty(f"group {group!r} has {len(members.members)} member(s); stop its consumers "
                                       "before resetting its offsets")
        log_start, high_watermark = replica.state_machine.offsets()
        if not log_start <= offset <= high_watermark:
            raise errors.OffsetOutOfRange(f"offset {offset} of {topic}/{partition} is outside the log "
                                          f"[{log_start}, {high_watermark}]")
        generation = replica.state_machine.highest_generation(group)
        command = group_commands.encode_commit_offset(group=group, member_id="", generation=generation, offset=offset,
                                          metadata="", reset=True, now_ms=self.context.clock.now_ms())
        return wait_result(replica.group.submit(command), self.context.commit_timeout_s)

    def expire_if_due(self, replica, live_groups) -> list[str]:
        """On a partition leader: propose dropping the offsets of groups that no longer exist and were last
        committed more than offsets_retention_ms ago (at most offsets_expire_groups_per_command_max per command);
        returns the groups proposed. The state machine re-checks each entry's age when it applies."""
        retention_ms = self.settings.offsets_retention_ms
        if retention_ms < 0:
            return []
        cutoff_ms = self.context.clock.now_ms() - retention_ms
        stale = [g for g in replica.state_machine.offsets_committed_before(cutoff_ms) if g not in live_groups]
        stale = stale[:self.settings.offsets_expire_groups_per_command_max]
        if stale:
            replica.group.submit(group_commands.encode_expire_offsets(groups=stale, committed_before_ms=cutoff_ms))
        return stale

    def fetch(self, group: str, topic: str, partition: int, *, consistent: bool = False,
              member: tuple[str, int] | None = None) -> PartitionLag:
        """The group's committed offset and lag; `consistent` reads it linearizably (every commit acknowledged
        before is seen, even on a leader elected a moment ago or deposed without knowing it: the leader confirms its
        leadership first, `RaftGroup.confirm_read`). `member` (member_id, generation) makes a consistent read the
        owner's start, through the log: checked like a commit, it fences commits of older generations in the
        partition."""
        rules.validate_group_name(group)
        replica = self.context.leader_replica(topic, partition, kind="stream")
        sm = replica.state_machine
        if consistent and member is not None:
            check_member(self.context, group, member[0], member[1], topic, partition)
            read = group_commands.encode_read_offset(group=group, generation=member[1])
            committed = wait_result(replica.group.submit(read), self.context.commit_timeout_s)
        else:
            if consistent:
                wait_result(replica.group.confirm_read(), self.context.commit_timeout_s)
            committed = sm.committed(group)
        log_start, high_watermark = sm.offsets()
        lag_records, lag_ms = lag_of(sm, committed, self.context.clock.now_ms())
        return PartitionLag(topic, partition, committed, log_start, high_watermark, lag_records, lag_ms)
