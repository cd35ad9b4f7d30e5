from . import raftbus_pb2 as _raftbus_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EnqueueMessage(_message.Message):
    __slots__ = ("record", "priority", "group", "deliver_at_ms", "idempotency_key", "origin_id", "delivery_count", "enqueued_ms", "last_error")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    record: bytes
    priority: int
    group: str
    deliver_at_ms: int
    idempotency_key: str
    origin_id: int
    delivery_count: int
    enqueued_ms: int
    last_error: str
    def __init__(self, record: _Optional[bytes] = ..., priority: _Optional[int] = ..., group: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., origin_id: _Optional[int] = ..., delivery_count: _Optional[int] = ..., enqueued_ms: _Optional[int] = ..., last_error: _Optional[str] = ...) -> None: ...

class QueueMessage(_message.Message):
    __slots__ = ("message_id", "partition", "state", "priority", "group", "delivery_count", "enqueued_ms", "available_ms", "lease_deadline_ms", "origin_id", "idempotency_key", "last_error", "record")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_MS_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    message_id: int
    partition: int
    state: str
    priority: int
    group: str
    delivery_count: int
    enqueued_ms: int
    available_ms: int
    lease_deadline_ms: int
    origin_id: int
    idempotency_key: str
    last_error: str
    record: bytes
    def __init__(self, message_id: _Optional[int] = ..., partition: _Optional[int] = ..., state: _Optional[str] = ..., priority: _Optional[int] = ..., group: _Optional[str] = ..., delivery_count: _Optional[int] = ..., enqueued_ms: _Optional[int] = ..., available_ms: _Optional[int] = ..., lease_deadline_ms: _Optional[int] = ..., origin_id: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., last_error: _Optional[str] = ..., record: _Optional[bytes] = ...) -> None: ...

class EnqueueRequest(_message.Message):
    __slots__ = ("request_id", "topic", "partition", "producer_id", "base_sequence", "messages", "history_mac")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    HISTORY_MAC_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    topic: str
    partition: int
    producer_id: bytes
    base_sequence: int
    messages: _containers.RepeatedCompositeFieldContainer[EnqueueMessage]
    history_mac: bytes
    def __init__(self, request_id: _Optional[int] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., producer_id: _Optional[bytes] = ..., base_sequence: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[EnqueueMessage, _Mapping]]] = ..., history_mac: _Optional[bytes] = ...) -> None: ...

class EnqueueResult(_message.Message):
    __slots__ = ("message_id", "duplicate")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    message_id: int
    duplicate: bool
    def __init__(self, message_id: _Optional[int] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class EnqueueResponse(_message.Message):
    __slots__ = ("request_id", "enqueued_ms", "results")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_MS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    enqueued_ms: int
    results: _containers.RepeatedCompositeFieldContainer[EnqueueResult]
    def __init__(self, request_id: _Optional[int] = ..., enqueued_ms: _Optional[int] = ..., results: _Optional[_Iterable[_Union[EnqueueResult, _Mapping]]] = ...) -> None: ...

class LeaseRequest(_message.Message):
    __slots__ = ("topic", "partition", "max_messages", "visibility_ms", "max_wait_ms", "max_in_flight", "packed")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    max_messages: int
    visibility_ms: int
    max_wait_ms: int
    max_in_flight: int
    packed: bool
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., max_messages: _Optional[int] = ..., visibility_ms: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., max_in_flight: _Optional[int] = ..., packed: _Optional[bool] = ...) -> None: ...

class LeaseResponse(_message.Message):
    __slots__ = ("messages", "error", "packed_messages")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PACKED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[QueueMessage]
    error: _raftbus_pb2.Error
    packed_messages: bytes
    def __init__(self, messages: _Optional[_Iterable[_Union[QueueMessage, _Mapping]]] = ..., error: _Optional[_Union[_raftbus_pb2.Error, _Mapping]] = ..., packed_messages: _Optional[bytes] = ...) -> None: ...

class LeaseRef(_message.Message):
    __slots__ = ("message_id", "delivery_count")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    message_id: int
    delivery_count: int
    def __init__(self, message_id: _Optional[int] = ..., delivery_count: _Optional[int] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("topic", "partition", "leases", "settler_id", "sequence", "packed_leases")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    SETTLER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PACKED_LEASES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    settler_id: bytes
    sequence: int
    packed_leases: bytes
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., leases: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ..., settler_id: _Optional[bytes] = ..., sequence: _Optional[int] = ..., packed_leases: _Optional[bytes] = ...) -> None: ...

class NackItem(_message.Message):
    __slots__ = ("message_id", "delivery_count", "delay_ms", "reason")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    message_id: int
    delivery_count: int
    delay_ms: int
    reason: str
    def __init__(self, message_id: _Optional[int] = ..., delivery_count: _Optional[int] = ..., delay_ms: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ("topic", "partition", "nacks", "settler_id", "sequence")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    NACKS_FIELD_NUMBER: _ClassVar[int]
    SETTLER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    nacks: _containers.RepeatedCompositeFieldContainer[NackItem]
    settler_id: bytes
    sequence: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., nacks: _Optional[_Iterable[_Union[NackItem, _Mapping]]] = ..., settler_id: _Optional[bytes] = ..., sequence: _Optional[int] = ...) -> None: ...

class ExtendItem(_message.Message):
    __slots__ = ("message_id", "delivery_count", "visibility_ms")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_MS_FIELD_NUMBER: _ClassVar[int]
    message_id: int
    delivery_count: int
    visibility_ms: int
    def __init__(self, message_id: _Optional[int] = ..., delivery_count: _Optional[int] = ..., visibility_ms: _Optional[int] = ...) -> None: ...

class ExtendRequest(_message.Message):
    __slots__ = ("topic", "partition", "extensions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EXTENSIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    extensions: _containers.RepeatedCompositeFieldContainer[ExtendItem]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., extensions: _Optional[_Iterable[_Union[ExtendItem, _Mapping]]] = ...) -> None: ...

class QueueItemResult(_message.Message):
    __slots__ = ("error", "lease_deadline_ms")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    error: _raftbus_pb2.Error
    lease_deadline_ms: int
    def __init__(self, error: _Optional[_Union[_raftbus_pb2.Error, _Mapping]] = ..., lease_deadline_ms: _Optional[int] = ...) -> None: ...

class QueueItemFailure(_message.Message):
    __slots__ = ("index", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    error: _raftbus_pb2.Error
    def __init__(self, index: _Optional[int] = ..., error: _Optional[_Union[_raftbus_pb2.Error, _Mapping]] = ...) -> None: ...

class QueueBatchResponse(_message.Message):
    __slots__ = ("results", "failures")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[QueueItemResult]
    failures: _containers.RepeatedCompositeFieldContainer[QueueItemFailure]
    def __init__(self, results: _Optional[_Iterable[_Union[QueueItemResult, _Mapping]]] = ..., failures: _Optional[_Iterable[_Union[QueueItemFailure, _Mapping]]] = ...) -> None: ...

class GetMessageRequest(_message.Message):
    __slots__ = ("topic", "message_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message_id: int
    def __init__(self, topic: _Optional[str] = ..., message_id: _Optional[int] = ...) -> None: ...

class DeleteMessagesRequest(_message.Message):
    __slots__ = ("topic", "partition", "message_ids")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    message_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., message_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ChangePriorityRequest(_message.Message):
    __slots__ = ("topic", "message_id", "priority", "deliver_at_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message_id: int
    priority: int
    deliver_at_ms: int
    def __init__(self, topic: _Optional[str] = ..., message_id: _Optional[int] = ..., priority: _Optional[int] = ..., deliver_at_ms: _Optional[int] = ...) -> None: ...

class ScanRequest(_message.Message):
    __slots__ = ("topic", "partition", "after_message_id", "max_messages")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    AFTER_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    after_message_id: int
    max_messages: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., after_message_id: _Optional[int] = ..., max_messages: _Optional[int] = ...) -> None: ...

class PeekRequest(_message.Message):
    __slots__ = ("topic", "partition", "state", "max_messages")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    state: str
    max_messages: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., state: _Optional[str] = ..., max_messages: _Optional[int] = ...) -> None: ...

class PeekResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[QueueMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[QueueMessage, _Mapping]]] = ...) -> None: ...

class QueueStatsRequest(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class QueueGroupStats(_message.Message):
    __slots__ = ("group", "ready", "delayed", "in_flight", "dead", "oldest_ready_age_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    DEAD_FIELD_NUMBER: _ClassVar[int]
    OLDEST_READY_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    ready: int
    delayed: int
    in_flight: int
    dead: int
    oldest_ready_age_ms: int
    def __init__(self, group: _Optional[str] = ..., ready: _Optional[int] = ..., delayed: _Optional[int] = ..., in_flight: _Optional[int] = ..., dead: _Optional[int] = ..., oldest_ready_age_ms: _Optional[int] = ...) -> None: ...

class QueuePartitionStats(_message.Message):
    __slots__ = ("partition", "ready", "delayed", "in_flight", "dead", "oldest_ready_age_ms", "next_delivery_ms", "enqueued_total", "groups", "groups_truncated")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    DEAD_FIELD_NUMBER: _ClassVar[int]
    OLDEST_READY_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_DELIVERY_MS_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    partition: int
    ready: int
    delayed: int
    in_flight: int
    dead: int
    oldest_ready_age_ms: int
    next_delivery_ms: int
    enqueued_total: int
    groups: _containers.RepeatedCompositeFieldContainer[QueueGroupStats]
    groups_truncated: bool
    def __init__(self, partition: _Optional[int] = ..., ready: _Optional[int] = ..., delayed: _Optional[int] = ..., in_flight: _Optional[int] = ..., dead: _Optional[int] = ..., oldest_ready_age_ms: _Optional[int] = ..., next_delivery_ms: _Optional[int] = ..., enqueued_total: _Optional[int] = ..., groups: _Optional[_Iterable[_Union[QueueGroupStats, _Mapping]]] = ..., groups_truncated: _Optional[bool] = ...) -> None: ...

class RedriveRequest(_message.Message):
    __slots__ = ("topic", "partition", "max_messages")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    max_messages: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., max_messages: _Optional[int] = ...) -> None: ...

class RedriveResponse(_message.Message):
    __slots__ = ("moved",)
    MOVED_FIELD_NUMBER: _ClassVar[int]
    moved: int
    def __init__(self, moved: _Optional[int] = ...) -> None: ...
