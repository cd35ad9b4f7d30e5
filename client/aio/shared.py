"""The pure parts of the sync SDK's group and queue packages that the asyncio SDK reuses, imported here once so
the rest of client/aio names one place for them."""
from raftbus.client.groups.calls import Assignment, JoinAnswer, TopicPartition, partitions_of, partitions_proto
from raftbus.client.groups.fetcher import ConsumerRecords, Fetcher
from raftbus.client.groups.member import REJOIN, RESYNC, MemberOptions, Membership, PartitionHooks
from raftbus.client.queues.consumer import check_consumer_options, now_ms, settle_entries, settlement_request
from raftbus.client.queues.leases import (
    ENDING_REASON,
    KeptSettler,
    LeaseCounts,
    LeaseKeeper,
    LeasePolicy,
    keep_leases_round,
)
from raftbus.client.queues.messages import Message, MessageMetadata, leased_messages
from raftbus.client.queues.producer import queue_partition

__all__ = ["Assignment", "ConsumerRecords", "ENDING_REASON", "Fetcher", "JoinAnswer",
           "KeptSettler", "LeaseCounts", "LeaseKeeper", "LeasePolicy", "MemberOptions", "Membership", "Message",
           "MessageMetadata", "PartitionHooks", "REJOIN", "RESYNC", "TopicPartition", "check_consumer_options",
           "keep_leases_round", "leased_messages", "now_ms", "partitions_of", "partitions_proto", "queue_partition",
           "settle_entries", "settlement_request"]
