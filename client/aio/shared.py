"""The pure parts of the sync SDK that the asyncio SDK reuses from modules that are not part of the SDK root
(group and queue internals): imported here once, so the rest of client/aio names one place for them."""
from raftbus.client.fetcher import Fetcher
from raftbus.client.group_calls import Assignment, JoinAnswer, TopicPartition, partitions_of, partitions_proto
from raftbus.client.membership import REJOIN, RESYNC
from raftbus.client.queue_consumer import settlement_request, settle_entries
from raftbus.client.queue_messages import Message, MessageMetadata, leased_messages
from raftbus.client.queue_producer import queue_partition

__all__ = ["Assignment", "Fetcher", "JoinAnswer", "Message", "MessageMetadata", "REJOIN", "RESYNC", "TopicPartition", "leased_messages",
           "partitions_of", "partitions_proto", "queue_partition", "settle_entries", "settlement_request"]
