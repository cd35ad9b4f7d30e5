"""The metadata group's sections: TopicSettings (a new topic's defaults, the cluster's bounds on topics and
partitions) and MembershipSettings (joining brokers, metadata voters, reassignments and decommissions)."""
from __future__ import annotations

from dataclasses import dataclass

from raftbus.broker.section import at_least, require, setting


@dataclass(frozen=True)
class TopicSettings:
    TITLE = "Topics"

    default_partitions: int = setting(3, "partitions of a topic created without a count")
    default_replication_factor: int = setting(3, "replicas of each partition of a topic created without a factor")
    partitions_per_topic_max: int = setting(10_000, "partitions one topic may have")
    topics_max: int = setting(10_000, "topics in the cluster (a queue topic's .dlq counts)")
    cluster_partitions_max: int = setting(40_000, "partitions of all topics together")
    broker_replicas_max: int = setting(12_000, "partition replicas placed on any one broker")
    default_retention_ms: int = setting(7 * 24 * 3600 * 1000, "7 days; -1 = unlimited")
    default_retention_bytes: int = setting(-1, "per partition; -1 = unlimited")

    def validate(self) -> None:
        at_least(self, 1, "topics_max", "cluster_partitions_max", "broker_replicas_max")


@dataclass(frozen=True)
class MembershipSettings:
    TITLE = "Membership and data movement (docs/replication.md)"

    join: str = setting("", "a running cluster's client address to join (instead of peers)")
    join_timeout_ms: int = setting(60_000, "how long a joining broker keeps asking to be added")
    membership_check_interval_ms: int = setting(500, "how often leaders promote caught-up learners and advance "
                                                     "reassignments")
    membership_promote_lag_entries_max: int = setting(64, "a learner within this many committed entries of the "
                                                          "leader is promoted")
    metadata_voters_max: int = setting(7, "metadata group voters at most (peers included); a caught-up broker beyond "
                                          "them stays a learner")
    membership_join_catch_up_timeout_ms: int = setting(
        60_000, "a joined broker that has not connected over the Raft port, proved itself and caught up within this "
                "is removed from the metadata group")
    membership_change_timeout_ms: int = setting(30_000, "how long one membership step may wait to commit")
    reassign_throttle_bytes_per_s: int = setting(0, "catch-up bytes/s sent to new replicas when a reassignment "
                                                    "names none; 0 = unlimited")
    reassignments_running_max: int = setting(8, "partition reassignments in flight at once (more get "
                                                "REASSIGNMENT_IN_PROGRESS)")

    def validate(self) -> None:
        at_least(self, 1, "membership_check_interval_ms", "membership_change_timeout_ms", "reassignments_running_max",
                 "join_timeout_ms", "metadata_voters_max", "membership_join_catch_up_timeout_ms")
        require(self.membership_promote_lag_entries_max >= 0 and self.reassign_throttle_bytes_per_s >= 0,
                "membership_promote_lag_entries_max and reassign_throttle_bytes_per_s must be >= 0")
