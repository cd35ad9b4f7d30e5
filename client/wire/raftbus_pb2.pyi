from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Error(_message.Message):
    __slots__ = ("code", "message", "leader_id", "leader_address")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    leader_id: int
    leader_address: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., leader_id: _Optional[int] = ..., leader_address: _Optional[str] = ...) -> None: ...

class BrokerInfo(_message.Message):
    __slots__ = ("broker_id", "address", "raft_address", "alive", "state", "metrics_url", "kafka_address")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    METRICS_URL_FIELD_NUMBER: _ClassVar[int]
    KAFKA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    address: str
    raft_address: str
    alive: bool
    state: str
    metrics_url: str
    kafka_address: str
    def __init__(self, broker_id: _Optional[int] = ..., address: _Optional[str] = ..., raft_address: _Optional[str] = ..., alive: _Optional[bool] = ..., state: _Optional[str] = ..., metrics_url: _Optional[str] = ..., kafka_address: _Optional[str] = ...) -> None: ...

class PartitionInfo(_message.Message):
    __slots__ = ("partition", "leader_id", "replicas", "isr", "log_start_offset", "high_watermark")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    partition: int
    leader_id: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    log_start_offset: int
    high_watermark: int
    def __init__(self, partition: _Optional[int] = ..., leader_id: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., log_start_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ...) -> None: ...

class TopicInfo(_message.Message):
    __slots__ = ("name", "topic_id", "kind", "ordering", "retention_ms", "retention_bytes", "partitions", "created_ms", "queue", "compaction")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ORDERING_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: int
    kind: str
    ordering: str
    retention_ms: int
    retention_bytes: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionInfo]
    created_ms: int
    queue: QueueOptions
    compaction: Compaction
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[int] = ..., kind: _Optional[str] = ..., ordering: _Optional[str] = ..., retention_ms: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionInfo, _Mapping]]] = ..., created_ms: _Optional[int] = ..., queue: _Optional[_Union[QueueOptions, _Mapping]] = ..., compaction: _Optional[_Union[Compaction, _Mapping]] = ...) -> None: ...

class Compaction(_message.Message):
    __slots__ = ("cleanup_policy", "min_compaction_lag_ms", "max_compaction_lag_ms", "delete_retention_ms", "segment_bytes")
    CLEANUP_POLICY_FIELD_NUMBER: _ClassVar[int]
    MIN_COMPACTION_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_COMPACTION_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    DELETE_RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    cleanup_policy: str
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    delete_retention_ms: int
    segment_bytes: int
    def __init__(self, cleanup_policy: _Optional[str] = ..., min_compaction_lag_ms: _Optional[int] = ..., max_compaction_lag_ms: _Optional[int] = ..., delete_retention_ms: _Optional[int] = ..., segment_bytes: _Optional[int] = ...) -> None: ...

class QueueOptions(_message.Message):
    __slots__ = ("max_deliveries", "backoff_base_ms", "backoff_max_ms", "max_in_flight_per_group", "idempotency_window_ms", "dead_letter_topic", "dead_letter_of")
    MAX_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_BASE_MS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MAX_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_PER_GROUP_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_OF_FIELD_NUMBER: _ClassVar[int]
    max_deliveries: int
    backoff_base_ms: int
    backoff_max_ms: int
    max_in_flight_per_group: int
    idempotency_window_ms: int
    dead_letter_topic: str
    dead_letter_of: str
    def __init__(self, max_deliveries: _Optional[int] = ..., backoff_base_ms: _Optional[int] = ..., backoff_max_ms: _Optional[int] = ..., max_in_flight_per_group: _Optional[int] = ..., idempotency_window_ms: _Optional[int] = ..., dead_letter_topic: _Optional[str] = ..., dead_letter_of: _Optional[str] = ...) -> None: ...

class ProduceRequest(_message.Message):
    __slots__ = ("request_id", "topic", "partition", "producer_id", "base_sequence", "record_count", "max_timestamp_ms", "records", "expected_revision")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    topic: str
    partition: int
    producer_id: bytes
    base_sequence: int
    record_count: int
    max_timestamp_ms: int
    records: bytes
    expected_revision: int
    def __init__(self, request_id: _Optional[int] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., producer_id: _Optional[bytes] = ..., base_sequence: _Optional[int] = ..., record_count: _Optional[int] = ..., max_timestamp_ms: _Optional[int] = ..., records: _Optional[bytes] = ..., expected_revision: _Optional[int] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("request_id", "topic", "partition", "base_offset", "duplicate", "error", "append_time_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    APPEND_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    topic: str
    partition: int
    base_offset: int
    duplicate: bool
    error: Error
    append_time_ms: int
    def __init__(self, request_id: _Optional[int] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., base_offset: _Optional[int] = ..., duplicate: _Optional[bool] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., append_time_ms: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset", "max_bytes", "max_wait_ms", "group", "member_id", "generation")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    max_bytes: int
    max_wait_ms: int
    group: str
    member_id: str
    generation: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("topic", "partition", "high_watermark", "log_start_offset", "batches", "error")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    high_watermark: int
    log_start_offset: int
    batches: bytes
    error: Error
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., batches: _Optional[bytes] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class FetchManyRequest(_message.Message):
    __slots__ = ("topic", "partitions", "max_bytes", "max_wait_ms", "group", "member_id", "generation")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionFetch]
    max_bytes: int
    max_wait_ms: int
    group: str
    member_id: str
    generation: int
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionFetch, _Mapping]]] = ..., max_bytes: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class PartitionFetch(_message.Message):
    __slots__ = ("partition", "offset", "max_bytes")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    max_bytes: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class FetchManyResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[FetchResponse]
    def __init__(self, partitions: _Optional[_Iterable[_Union[FetchResponse, _Mapping]]] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("topic", "partition", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("offset", "log_start_offset", "high_watermark")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    offset: int
    log_start_offset: int
    high_watermark: int
    def __init__(self, offset: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ...) -> None: ...

class GetKeyRequest(_message.Message):
    __slots__ = ("topic", "partition", "key")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    key: bytes
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., key: _Optional[bytes] = ...) -> None: ...

class GetKeyResponse(_message.Message):
    __slots__ = ("found", "revision", "value", "timestamp_ms", "headers", "high_watermark")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    found: bool
    revision: int
    value: bytes
    timestamp_ms: int
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    high_watermark: int
    def __init__(self, found: _Optional[bool] = ..., revision: _Optional[int] = ..., value: _Optional[bytes] = ..., timestamp_ms: _Optional[int] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., high_watermark: _Optional[int] = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: bytes
    def __init__(self, name: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class ListKeysRequest(_message.Message):
    __slots__ = ("topic", "partition", "prefix", "start_after", "limit")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    START_AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    prefix: bytes
    start_after: bytes
    limit: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., prefix: _Optional[bytes] = ..., start_after: _Optional[bytes] = ..., limit: _Optional[int] = ...) -> None: ...

class KeyRevision(_message.Message):
    __slots__ = ("key", "revision")
    KEY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    revision: int
    def __init__(self, key: _Optional[bytes] = ..., revision: _Optional[int] = ...) -> None: ...

class ListKeysResponse(_message.Message):
    __slots__ = ("keys", "more", "high_watermark")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[KeyRevision]
    more: bool
    high_watermark: int
    def __init__(self, keys: _Optional[_Iterable[_Union[KeyRevision, _Mapping]]] = ..., more: _Optional[bool] = ..., high_watermark: _Optional[int] = ...) -> None: ...

class CheckpointPartitionRequest(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class ReplicaRef(_message.Message):
    __slots__ = ("broker_id", "address")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    address: str
    def __init__(self, broker_id: _Optional[int] = ..., address: _Optional[str] = ...) -> None: ...

class CheckpointPartitionResponse(_message.Message):
    __slots__ = ("index", "replicas")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    index: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaRef]
    def __init__(self, index: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaRef, _Mapping]]] = ...) -> None: ...

class ReplicaCheckpointRequest(_message.Message):
    __slots__ = ("topic", "partition", "index", "max_wait_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    index: int
    max_wait_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., index: _Optional[int] = ..., max_wait_ms: _Optional[int] = ...) -> None: ...

class ReplicaCheckpointResponse(_message.Message):
    __slots__ = ("broker_id", "index", "applied_index", "log_start_offset", "high_watermark", "digest_tracked", "digest", "store_checked", "store_consistent")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    DIGEST_TRACKED_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    STORE_CHECKED_FIELD_NUMBER: _ClassVar[int]
    STORE_CONSISTENT_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    index: int
    applied_index: int
    log_start_offset: int
    high_watermark: int
    digest_tracked: bool
    digest: int
    store_checked: bool
    store_consistent: bool
    def __init__(self, broker_id: _Optional[int] = ..., index: _Optional[int] = ..., applied_index: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., digest_tracked: _Optional[bool] = ..., digest: _Optional[int] = ..., store_checked: _Optional[bool] = ..., store_consistent: _Optional[bool] = ...) -> None: ...

class StoreCopyRequest(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class StoreChunk(_message.Message):
    __slots__ = ("data", "applied_index")
    DATA_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    applied_index: int
    def __init__(self, data: _Optional[bytes] = ..., applied_index: _Optional[int] = ...) -> None: ...

class RebuildReplicaRequest(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class RebuildReplicaResponse(_message.Message):
    __slots__ = ("broker_id", "source_broker_id", "applied_index", "image_bytes")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    IMAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    source_broker_id: int
    applied_index: int
    image_bytes: int
    def __init__(self, broker_id: _Optional[int] = ..., source_broker_id: _Optional[int] = ..., applied_index: _Optional[int] = ..., image_bytes: _Optional[int] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("name", "partitions", "replication_factor", "kind", "ordering", "retention_ms", "retention_bytes", "max_deliveries", "backoff_base_ms", "backoff_max_ms", "max_in_flight_per_group", "idempotency_window_ms", "cleanup_policy", "min_compaction_lag_ms", "max_compaction_lag_ms", "delete_retention_ms", "segment_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ORDERING_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_BASE_MS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MAX_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_PER_GROUP_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_POLICY_FIELD_NUMBER: _ClassVar[int]
    MIN_COMPACTION_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_COMPACTION_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    DELETE_RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    replication_factor: int
    kind: str
    ordering: str
    retention_ms: int
    retention_bytes: int
    max_deliveries: int
    backoff_base_ms: int
    backoff_max_ms: int
    max_in_flight_per_group: int
    idempotency_window_ms: int
    cleanup_policy: str
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    delete_retention_ms: int
    segment_bytes: int
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., kind: _Optional[str] = ..., ordering: _Optional[str] = ..., retention_ms: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., max_deliveries: _Optional[int] = ..., backoff_base_ms: _Optional[int] = ..., backoff_max_ms: _Optional[int] = ..., max_in_flight_per_group: _Optional[int] = ..., idempotency_window_ms: _Optional[int] = ..., cleanup_policy: _Optional[str] = ..., min_compaction_lag_ms: _Optional[int] = ..., max_compaction_lag_ms: _Optional[int] = ..., delete_retention_ms: _Optional[int] = ..., segment_bytes: _Optional[int] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: TopicInfo
    def __init__(self, topic: _Optional[_Union[TopicInfo, _Mapping]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicInfo]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicInfo, _Mapping]]] = ...) -> None: ...

class DescribeTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class AlterPartitionsRequest(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ...) -> None: ...

class SetBrokerStateRequest(_message.Message):
    __slots__ = ("broker_id", "state")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    state: str
    def __init__(self, broker_id: _Optional[int] = ..., state: _Optional[str] = ...) -> None: ...

class StartAtRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class AlterTopicRequest(_message.Message):
    __slots__ = ("name", "retention_ms", "retention_bytes", "max_deliveries", "backoff_base_ms", "backoff_max_ms", "max_in_flight_per_group", "idempotency_window_ms", "cleanup_policy", "min_compaction_lag_ms", "max_compaction_lag_ms", "delete_retention_ms", "segment_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_BASE_MS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MAX_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_PER_GROUP_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_POLICY_FIELD_NUMBER: _ClassVar[int]
    MIN_COMPACTION_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_COMPACTION_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    DELETE_RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    retention_ms: int
    retention_bytes: int
    max_deliveries: int
    backoff_base_ms: int
    backoff_max_ms: int
    max_in_flight_per_group: int
    idempotency_window_ms: int
    cleanup_policy: str
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    delete_retention_ms: int
    segment_bytes: int
    def __init__(self, name: _Optional[str] = ..., retention_ms: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., max_deliveries: _Optional[int] = ..., backoff_base_ms: _Optional[int] = ..., backoff_max_ms: _Optional[int] = ..., max_in_flight_per_group: _Optional[int] = ..., idempotency_window_ms: _Optional[int] = ..., cleanup_policy: _Optional[str] = ..., min_compaction_lag_ms: _Optional[int] = ..., max_compaction_lag_ms: _Optional[int] = ..., delete_retention_ms: _Optional[int] = ..., segment_bytes: _Optional[int] = ...) -> None: ...

class MetadataRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class MetadataResponse(_message.Message):
    __slots__ = ("brokers", "controller_id", "topics", "answering_broker_id")
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ANSWERING_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerInfo]
    controller_id: int
    topics: _containers.RepeatedCompositeFieldContainer[TopicInfo]
    answering_broker_id: int
    def __init__(self, brokers: _Optional[_Iterable[_Union[BrokerInfo, _Mapping]]] = ..., controller_id: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[TopicInfo, _Mapping]]] = ..., answering_broker_id: _Optional[int] = ...) -> None: ...

class ClusterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterStatusResponse(_message.Message):
    __slots__ = ("brokers", "controller_id", "topics", "answering_broker_id", "cluster_id")
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ANSWERING_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerInfo]
    controller_id: int
    topics: _containers.RepeatedCompositeFieldContainer[TopicInfo]
    answering_broker_id: int
    cluster_id: str
    def __init__(self, brokers: _Optional[_Iterable[_Union[BrokerInfo, _Mapping]]] = ..., controller_id: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[TopicInfo, _Mapping]]] = ..., answering_broker_id: _Optional[int] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class BrokerStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerStatsResponse(_message.Message):
    __slots__ = ("broker_id", "rss_bytes", "cpu_user_s", "cpu_system_s", "uptime_s", "groups_hosted", "groups_led", "durability_window_p50_ms", "durability_window_p99_ms", "durability_window_max_ms", "group_commit_rounds", "pid", "stopped_groups", "disk_full", "damaged_stores", "groups_quiesced", "compaction_passes", "compaction_bytes_scanned", "compaction_bytes_removed", "compaction_busy_s", "compaction_key_map_peak_bytes", "heap_trims", "heap_trim_busy_s", "heap_trim_longest_ms", "heap_trim_returned_bytes", "raft_log_bytes")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_USER_S_FIELD_NUMBER: _ClassVar[int]
    CPU_SYSTEM_S_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    GROUPS_HOSTED_FIELD_NUMBER: _ClassVar[int]
    GROUPS_LED_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_WINDOW_P50_MS_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_WINDOW_P99_MS_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_WINDOW_MAX_MS_FIELD_NUMBER: _ClassVar[int]
    GROUP_COMMIT_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STOPPED_GROUPS_FIELD_NUMBER: _ClassVar[int]
    DISK_FULL_FIELD_NUMBER: _ClassVar[int]
    DAMAGED_STORES_FIELD_NUMBER: _ClassVar[int]
    GROUPS_QUIESCED_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_PASSES_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_BYTES_SCANNED_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_BYTES_REMOVED_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_BUSY_S_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_KEY_MAP_PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    HEAP_TRIMS_FIELD_NUMBER: _ClassVar[int]
    HEAP_TRIM_BUSY_S_FIELD_NUMBER: _ClassVar[int]
    HEAP_TRIM_LONGEST_MS_FIELD_NUMBER: _ClassVar[int]
    HEAP_TRIM_RETURNED_BYTES_FIELD_NUMBER: _ClassVar[int]
    RAFT_LOG_BYTES_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    rss_bytes: int
    cpu_user_s: float
    cpu_system_s: float
    uptime_s: float
    groups_hosted: int
    groups_led: int
    durability_window_p50_ms: float
    durability_window_p99_ms: float
    durability_window_max_ms: float
    group_commit_rounds: int
    pid: int
    stopped_groups: _containers.RepeatedScalarFieldContainer[str]
    disk_full: bool
    damaged_stores: _containers.RepeatedScalarFieldContainer[str]
    groups_quiesced: int
    compaction_passes: int
    compaction_bytes_scanned: int
    compaction_bytes_removed: int
    compaction_busy_s: float
    compaction_key_map_peak_bytes: int
    heap_trims: int
    heap_trim_busy_s: float
    heap_trim_longest_ms: float
    heap_trim_returned_bytes: int
    raft_log_bytes: int
    def __init__(self, broker_id: _Optional[int] = ..., rss_bytes: _Optional[int] = ..., cpu_user_s: _Optional[float] = ..., cpu_system_s: _Optional[float] = ..., uptime_s: _Optional[float] = ..., groups_hosted: _Optional[int] = ..., groups_led: _Optional[int] = ..., durability_window_p50_ms: _Optional[float] = ..., durability_window_p99_ms: _Optional[float] = ..., durability_window_max_ms: _Optional[float] = ..., group_commit_rounds: _Optional[int] = ..., pid: _Optional[int] = ..., stopped_groups: _Optional[_Iterable[str]] = ..., disk_full: _Optional[bool] = ..., damaged_stores: _Optional[_Iterable[str]] = ..., groups_quiesced: _Optional[int] = ..., compaction_passes: _Optional[int] = ..., compaction_bytes_scanned: _Optional[int] = ..., compaction_bytes_removed: _Optional[int] = ..., compaction_busy_s: _Optional[float] = ..., compaction_key_map_peak_bytes: _Optional[int] = ..., heap_trims: _Optional[int] = ..., heap_trim_busy_s: _Optional[float] = ..., heap_trim_longest_ms: _Optional[float] = ..., heap_trim_returned_bytes: _Optional[int] = ..., raft_log_bytes: _Optional[int] = ...) -> None: ...
