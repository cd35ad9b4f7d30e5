from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TopicPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group", "member_id", "client_id", "topics", "session_timeout_ms", "rebalance_timeout_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    client_id: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., client_id: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("member_id", "generation", "session_timeout_ms", "rebalance_timeout_ms", "heartbeat_interval_ms")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    generation: int
    session_timeout_ms: int
    rebalance_timeout_ms: int
    heartbeat_interval_ms: int
    def __init__(self, member_id: _Optional[str] = ..., generation: _Optional[int] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group", "member_id", "generation", "max_wait_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    max_wait_ms: int
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., max_wait_ms: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("generation", "rebalance")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_FIELD_NUMBER: _ClassVar[int]
    generation: int
    rebalance: bool
    def __init__(self, generation: _Optional[int] = ..., rebalance: _Optional[bool] = ...) -> None: ...

class SyncGroupRequest(_message.Message):
    __slots__ = ("group", "member_id", "generation", "released")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    released: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., released: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ...) -> None: ...

class SyncGroupResponse(_message.Message):
    __slots__ = ("generation", "owned", "revoking", "pending")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    REVOKING_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    generation: int
    owned: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    revoking: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    pending: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    def __init__(self, generation: _Optional[int] = ..., owned: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ..., revoking: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ..., pending: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group", "member_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CommitOffsetRequest(_message.Message):
    __slots__ = ("group", "member_id", "generation", "topic", "partition", "offset", "metadata", "reset")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    topic: str
    partition: int
    offset: int
    metadata: str
    reset: bool
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ..., reset: _Optional[bool] = ...) -> None: ...

class CommitOffsetResponse(_message.Message):
    __slots__ = ("offset", "commit_time_ms")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    offset: int
    commit_time_ms: int
    def __init__(self, offset: _Optional[int] = ..., commit_time_ms: _Optional[int] = ...) -> None: ...

class ResetOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "partition", "offset")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    partition: int
    offset: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class RegisterGroupRequest(_message.Message):
    __slots__ = ("group", "topics")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ...) -> None: ...

class FetchOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "partition", "consistent", "member_id", "generation")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    CONSISTENT_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    partition: int
    consistent: bool
    member_id: str
    generation: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., consistent: _Optional[bool] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class PartitionOffset(_message.Message):
    __slots__ = ("topic", "partition", "committed_offset", "generation", "commit_time_ms", "metadata", "log_start_offset", "high_watermark", "lag_records", "lag_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LAG_RECORDS_FIELD_NUMBER: _ClassVar[int]
    LAG_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    committed_offset: int
    generation: int
    commit_time_ms: int
    metadata: str
    log_start_offset: int
    high_watermark: int
    lag_records: int
    lag_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., committed_offset: _Optional[int] = ..., generation: _Optional[int] = ..., commit_time_ms: _Optional[int] = ..., metadata: _Optional[str] = ..., log_start_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., lag_records: _Optional[int] = ..., lag_ms: _Optional[int] = ...) -> None: ...

class DeleteOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "partition")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    partition: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class DeleteOffsetResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class GroupMember(_message.Message):
    __slots__ = ("member_id", "client_id", "topics", "session_timeout_ms", "rebalance_timeout_ms", "joined_ms", "owned", "target")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    JOINED_MS_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    client_id: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    joined_ms: int
    owned: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    target: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    def __init__(self, member_id: _Optional[str] = ..., client_id: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., joined_ms: _Optional[int] = ..., owned: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ..., target: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ...) -> None: ...

class GroupInfo(_message.Message):
    __slots__ = ("name", "generation", "state", "members", "topics", "created_ms", "changed_ms", "protocol", "protocol_type", "assignor")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    CHANGED_MS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    name: str
    generation: int
    state: str
    members: _containers.RepeatedCompositeFieldContainer[GroupMember]
    topics: _containers.RepeatedScalarFieldContainer[str]
    created_ms: int
    changed_ms: int
    protocol: str
    protocol_type: str
    assignor: str
    def __init__(self, name: _Optional[str] = ..., generation: _Optional[int] = ..., state: _Optional[str] = ..., members: _Optional[_Iterable[_Union[GroupMember, _Mapping]]] = ..., topics: _Optional[_Iterable[str]] = ..., created_ms: _Optional[int] = ..., changed_ms: _Optional[int] = ..., protocol: _Optional[str] = ..., protocol_type: _Optional[str] = ..., assignor: _Optional[str] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupInfo]
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupInfo, _Mapping]]] = ...) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...
