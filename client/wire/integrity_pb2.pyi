from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class MetadataDigestRequest(_message.Message):
    __slots__ = ("index", "max_wait_ms")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    index: int
    max_wait_ms: int
    def __init__(self, index: _Optional[int] = ..., max_wait_ms: _Optional[int] = ...) -> None: ...

class MetadataDigestResponse(_message.Message):
    __slots__ = ("broker_id", "index", "applied_index", "digest", "store_checked", "store_consistent")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    STORE_CHECKED_FIELD_NUMBER: _ClassVar[int]
    STORE_CONSISTENT_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    index: int
    applied_index: int
    digest: int
    store_checked: bool
    store_consistent: bool
    def __init__(self, broker_id: _Optional[int] = ..., index: _Optional[int] = ..., applied_index: _Optional[int] = ..., digest: _Optional[int] = ..., store_checked: _Optional[bool] = ..., store_consistent: _Optional[bool] = ...) -> None: ...
