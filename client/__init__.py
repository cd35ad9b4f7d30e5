"""The raftbus SDK: `from raftbus.client import Admin, Consumer, Producer, Reader, QueueConsumer, Queues`.

The broker imports only `raftbus.client.errors`, `raftbus.client.records` and the generated `raftbus.client.wire`
modules from here (the wire protocol lives with the clients, as in Kafka); the SDK never imports the broker.
"""
from raftbus.client import errors
from raftbus.client.admin import Admin, BrokerDescription, BrokerStats, ClusterStatus, PartitionDescription, TopicDescription
from raftbus.client.errors import RaftbusError
from raftbus.client.producer import Producer
from raftbus.client.queue_consumer import QueueConsumer
from raftbus.client.queue_messages import Message, MessageMetadata, QueueStats
from raftbus.client.queues import Queues
from raftbus.client.reader import EARLIEST, LATEST, FetchResult, Reader
from raftbus.client.records import Record, RecordMetadata
# consumer groups
from raftbus.client.consumer import Consumer
from raftbus.client.fetcher import ConsumerRecords
from raftbus.client.group_admin import GroupDescription, MemberDescription, PartitionLag
from raftbus.client.group_calls import TopicPartition

__all__ = [
    "Admin", "BrokerDescription", "BrokerStats", "ClusterStatus", "EARLIEST", "FetchResult", "LATEST", "PartitionDescription",
    "Producer", "RaftbusError", "Reader", "Record", "RecordMetadata", "TopicDescription", "errors",
    # consumer groups
    "Consumer", "ConsumerRecords", "GroupDescription", "MemberDescription", "PartitionLag", "TopicPartition",
    # queue topics
    "Message", "MessageMetadata", "QueueConsumer", "QueueStats", "Queues",
]
