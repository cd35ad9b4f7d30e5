"""The raftbus SDK: `from raftbus.client import Admin, Consumer, Producer, Reader, QueueConsumer, Queues, Table`.

The names below load on first use (`__getattr__`), each from its own module, so importing one module of the
package (the broker imports only `raftbus.client.errors`, `raftbus.client.records`, the generated
`raftbus.client.wire` modules and the few others it shares with the SDK: the wire protocol lives with the clients,
as in Kafka) does not load the whole SDK. The SDK never imports the broker.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from raftbus.client import errors  # the error hierarchy: light, and what every part of the package raises

# every public name, by the module that defines it
_EXPORTS = {
    "raftbus.client.admin": ("Admin", "BrokerDescription", "BrokerStats", "ClusterStatus", "PartitionDescription",
                             "TopicDescription"),
    "raftbus.client.errors": ("RaftbusError",),
    "raftbus.client.producer": ("Producer",),
    "raftbus.client.reader": ("EARLIEST", "LATEST", "FetchResult", "Reader"),
    "raftbus.client.records": ("Record", "RecordMetadata"),
    # consumer groups
    "raftbus.client.consumer": ("Consumer",),
    "raftbus.client.groups.fetcher": ("ConsumerRecords",),
    "raftbus.client.groups.admin": ("GroupDescription", "MemberDescription", "PartitionLag"),
    "raftbus.client.groups.calls": ("TopicPartition",),
    # queue topics
    "raftbus.client.queues.consumer": ("QueueConsumer",),
    "raftbus.client.queues.messages": ("Message", "MessageMetadata", "QueueStats"),
    "raftbus.client.queues.admin": ("Queues",),
    # key-value tables over compacted topics
    "raftbus.client.table": ("Entry", "Table", "WatchEvent"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF) + ["errors"]


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # loaded once: later lookups find it here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # what type checkers and editors read; at run time the names load on first use
    from raftbus.client.admin import (Admin, BrokerDescription, BrokerStats, ClusterStatus, PartitionDescription,
                                      TopicDescription)
    from raftbus.client.consumer import Consumer
    from raftbus.client.errors import RaftbusError
    from raftbus.client.groups.admin import GroupDescription, MemberDescription, PartitionLag
    from raftbus.client.groups.calls import TopicPartition
    from raftbus.client.groups.fetcher import ConsumerRecords
    from raftbus.client.producer import Producer
    from raftbus.client.queues.admin import Queues
    from raftbus.client.queues.consumer import QueueConsumer
    from raftbus.client.queues.messages import Message, MessageMetadata, QueueStats
    from raftbus.client.reader import EARLIEST, LATEST, FetchResult, Reader
    from raftbus.client.records import Record, RecordMetadata
    from raftbus.client.table import Entry, Table, WatchEvent
