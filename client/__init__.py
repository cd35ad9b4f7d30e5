"""The raftbus SDK: `from raftbus.client import Admin, Consumer, Producer, Reader, QueueConsumer, Queues, Table`.

The broker imports only `raftbus.client.errors`, `raftbus.client.records` and the generated `raftbus.client.wire`
modules from here (the wire protocol lives with the clients, as in Kafka); the SDK never imports the broker.
"""
from raftbus.client import errors
from raftbus.client.admin import Admin, BrokerDescription, BrokerStats, ClusterStatus, PartitionDescription, TopicDescription
from raftbus.client.errors import RaftbusError
from raftbus.client.producer import Producer
from raftbus.client.queues.consumer import QueueConsumer
from raftbus.client.queues.messages import Message, MessageMetadata, QueueStats
from raftbus.client.queues.admin import Queues
from raftbus.client.reader import EARLIEST, LATEST, FetchResult, Reader
from raftbus.client.records import Record, RecordMetadata
from raftbus.client.table import Entry, Table, WatchEvent
# consumer groups
from raftbus.client.consumer import Consumer
from raftbus.client.groups.fetcher import ConsumerRecords
from raftbus.client.groups.admin import GroupDescription, MemberDescription, PartitionLag
from raftbus.client.groups.calls import TopicPartition

__all__ = [
    "Admin", "BrokerDescription", "BrokerStats", "ClusterStatus", "EARLIEST", "FetchResult", "LATEST", "PartitionDescription",
    "Producer", "RaftbusError", "Reader", "Record", "RecordMetadata", "TopicDescription", "errors",
    # consumer groups
    "Consumer", "ConsumerRecords", "GroupDescription", "MemberDescription", "PartitionLag", "TopicPartition",
    # queue topics
    "Message", "MessageMetadata", "QueueConsumer", "QueueStats", "Queues",
    # key-value tables over compacted topics
    "Entry", "Table", "WatchEvent",
]
