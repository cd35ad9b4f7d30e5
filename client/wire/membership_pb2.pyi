from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MemberAddress(_message.Message):
    __slots__ = ("broker_id", "raft_address")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    raft_address: str
    def __init__(self, broker_id: _Optional[int] = ..., raft_address: _Optional[str] = ...) -> None: ...

class JoinClusterRequest(_message.Message):
    __slots__ = ("broker_id", "address", "raft_address", "metrics_url")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    METRICS_URL_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    address: str
    raft_address: str
    metrics_url: str
    def __init__(self, broker_id: _Optional[int] = ..., address: _Optional[str] = ..., raft_address: _Optional[str] = ..., metrics_url: _Optional[str] = ...) -> None: ...

class JoinClusterResponse(_message.Message):
    __slots__ = ("brokers", "voters", "learners")
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    LEARNERS_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[MemberAddress]
    voters: _containers.RepeatedScalarFieldContainer[int]
    learners: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, brokers: _Optional[_Iterable[_Union[MemberAddress, _Mapping]]] = ..., voters: _Optional[_Iterable[int]] = ..., learners: _Optional[_Iterable[int]] = ...) -> None: ...

class MetadataMembersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MetadataMembersResponse(_message.Message):
    __slots__ = ("voters", "learners", "config_index", "controller_id", "answering_broker_id")
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    LEARNERS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_INDEX_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    ANSWERING_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    voters: _containers.RepeatedScalarFieldContainer[int]
    learners: _containers.RepeatedScalarFieldContainer[int]
    config_index: int
    controller_id: int
    answering_broker_id: int
    def __init__(self, voters: _Optional[_Iterable[int]] = ..., learners: _Optional[_Iterable[int]] = ..., config_index: _Optional[int] = ..., controller_id: _Optional[int] = ..., answering_broker_id: _Optional[int] = ...) -> None: ...

class ReassignPartitionRequest(_message.Message):
    __slots__ = ("topic", "partition", "replicas", "throttle_bytes_per_s")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    throttle_bytes_per_s: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., throttle_bytes_per_s: _Optional[int] = ...) -> None: ...

class ReassignmentInfo(_message.Message):
    __slots__ = ("topic", "partition", "replicas", "target", "voters", "learners", "lag_entries", "done")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    LEARNERS_FIELD_NUMBER: _ClassVar[int]
    LAG_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    target: _containers.RepeatedScalarFieldContainer[int]
    voters: _containers.RepeatedScalarFieldContainer[int]
    learners: _containers.RepeatedScalarFieldContainer[int]
    lag_entries: int
    done: bool
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., target: _Optional[_Iterable[int]] = ..., voters: _Optional[_Iterable[int]] = ..., learners: _Optional[_Iterable[int]] = ..., lag_entries: _Optional[int] = ..., done: _Optional[bool] = ...) -> None: ...

class DescribeReassignmentRequest(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class DecommissionBrokerRequest(_message.Message):
    __slots__ = ("broker_id",)
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    def __init__(self, broker_id: _Optional[int] = ...) -> None: ...

class DecommissionInfo(_message.Message):
    __slots__ = ("broker_id", "replicas_left", "reassignments_running", "metadata_voter", "done")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_LEFT_FIELD_NUMBER: _ClassVar[int]
    REASSIGNMENTS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    METADATA_VOTER_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    replicas_left: int
    reassignments_running: int
    metadata_voter: bool
    done: bool
    def __init__(self, broker_id: _Optional[int] = ..., replicas_left: _Optional[int] = ..., reassignments_running: _Optional[int] = ..., metadata_voter: _Optional[bool] = ..., done: _Optional[bool] = ...) -> None: ...

class DescribeDecommissionRequest(_message.Message):
    __slots__ = ("broker_id",)
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    def __init__(self, broker_id: _Optional[int] = ...) -> None: ...
