"""GroupSettings: consumer groups of stream topics (members, sessions, rebalances) and their committed offsets."""
from __future__ import annotations

from dataclasses import dataclass

from raftbus.broker.section import at_least, require, setting

WEEK_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True)
class GroupSettings:
    TITLE = "Consumer groups (stream topics)"

    session_timeout_ms: int = setting(45_000, "a member that stops heartbeating for this long is removed (default)")
    session_timeout_min_ms: int = setting(6_000, "bounds on what a member may ask for")
    session_timeout_max_ms: int = setting(1_800_000, "... and the upper one")
    heartbeat_interval_ms: int = setting(3_000, "told to members; a heartbeat long-polls up to this for a new "
                                                "generation")
    rebalance_timeout_ms: int = setting(60_000, "a member may hold revoked partitions this long before it is "
                                                "removed")
    rebalance_timeout_max_ms: int = setting(1_800_000, "the longest rebalance_timeout_ms a member may ask for")
    group_members_max: int = setting(1_000, "members of one group")
    groups_max: int = setting(10_000, "consumer groups in the cluster")
    group_topics_per_member_max: int = setting(100, "topics one member may subscribe to")
    group_expiry_check_interval_ms: int = setting(500, "how often the controller looks for expired members")
    group_empty_retention_ms: int = setting(WEEK_MS, "an empty group is deleted after this (7 days)")
    group_heartbeat_waiters_max: int = setting(32, "long-polling heartbeats held at once; more answer at once")
    offset_metadata_bytes_max: int = setting(4096, "the optional string stored with a committed offset")
    offsets_retention_ms: int = setting(WEEK_MS, "a group's committed offset is dropped once not committed for this "
                                                 "long and the group no longer exists (7 days; -1 = keep forever)")
    offsets_retention_check_interval_ms: int = setting(600_000, "how often partition leaders look for such offsets "
                                                                "(10 min)")
    offsets_expire_groups_per_command_max: int = setting(1_000, "groups whose offsets one expiry command drops, per "
                                                                "partition")

    def validate(self) -> None:
        require(0 < self.session_timeout_min_ms <= self.session_timeout_ms <= self.session_timeout_max_ms,
                "need 0 < session_timeout_min_ms <= session_timeout_ms <= session_timeout_max_ms")
        require(0 < self.heartbeat_interval_ms < self.session_timeout_min_ms,
                "heartbeat_interval_ms must be > 0 and below session_timeout_min_ms")
        require(0 < self.rebalance_timeout_ms <= self.rebalance_timeout_max_ms,
                "need 0 < rebalance_timeout_ms <= rebalance_timeout_max_ms")
        at_least(self, 1, "group_members_max", "groups_max", "group_topics_per_member_max",
                 "group_expiry_check_interval_ms", "offset_metadata_bytes_max", "offsets_expire_groups_per_command_max",
                 "offsets_retention_check_interval_ms")
        require(self.offsets_retention_ms >= -1 and self.offsets_retention_ms != 0,
                "offsets_retention_ms must be > 0, or -1 to keep committed offsets forever")
