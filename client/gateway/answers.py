"""Answer bodies of the HTTP API (pydantic models: the response schemas of /openapi.json).

Endpoints return plain dicts; FastAPI checks them against these models and leaves out fields that were not set,
so `value_b64` appears only where `value` is not UTF-8 text.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# Answers that mirror an SDK description's to_dict(): fields the SDK adds later pass through unchanged.
SdkShape = ConfigDict(extra="allow")


class ErrorBody(BaseModel):
    code: str = Field(description="the stable code of the error table (docs/errors.md)")
    message: str
    retriable: bool


class ErrorAnswer(BaseModel):
    error: ErrorBody


class ItemResult(BaseModel):
    """One item of a batch: empty when done, else its error."""

    error: ErrorBody | None = None


class Bytes(BaseModel):
    key: str | None = None
    key_b64: str | None = None
    value: str | None = None
    value_b64: str | None = None
    headers: dict[str, str | None] = {}
    headers_b64: dict[str, str] | None = None


class RecordOut(Bytes):
    offset: int
    timestamp_ms: int


class ConsumedRecord(RecordOut):
    topic: str
    partition: int


class RecordOffset(ItemResult):
    partition: int | None = None
    offset: int | None = None


class ProduceAnswer(BaseModel):
    offsets: list[RecordOffset] = Field(description="per record, in request order")


class FetchAnswer(BaseModel):
    records: list[RecordOut]
    next_offset: int = Field(description="the offset to fetch next")
    high_watermark: int
    log_start_offset: int


class InstanceAnswer(BaseModel):
    instance_id: str
    base_uri: str


class TopicsAnswer(BaseModel):
    topics: list[str]


class PollAnswer(BaseModel):
    records: list[ConsumedRecord]


class TopicPartitionOffset(BaseModel):
    topic: str
    partition: int
    offset: int


class OffsetsAnswer(BaseModel):
    offsets: list[TopicPartitionOffset]


class TopicPartitionOut(BaseModel):
    topic: str
    partition: int


class AssignmentAnswer(BaseModel):
    partitions: list[TopicPartitionOut]


class DeletedAnswer(BaseModel):
    deleted: str | int


class Enqueued(ItemResult):
    id: int | None = Field(None, description="the message id (stable for the message's life)")
    partition: int | None = None
    duplicate: bool | None = Field(None, description="an idempotency key matched an earlier message: its id")
    timestamp_ms: int | None = None


class EnqueueAnswer(BaseModel):
    messages: list[Enqueued] = Field(description="per message, in request order")


class MessageOut(Bytes):
    id: int
    partition: int
    state: str = Field(description="ready, delayed, in_flight or dead")
    priority: int
    group: str
    delivery_count: int
    enqueued_ms: int
    available_ms: int
    lease_deadline_ms: int
    timestamp_ms: int
    idempotency_key: str
    last_error: str
    lease: str | None = Field(None, description="leased messages: what acks, nacks and extend take")


class MessagesAnswer(BaseModel):
    messages: list[MessageOut]


class SettleAnswer(BaseModel):
    results: list[ItemResult] = Field(description="per lease, in request order")


class Extended(ItemResult):
    lease_deadline_ms: int | None = None


class ExtendAnswer(BaseModel):
    results: list[Extended]


class RedriveAnswer(BaseModel):
    moved: int


class PartitionOut(BaseModel):
    model_config = SdkShape
    partition: int
    leader_id: int | None
    replicas: list[int]
    isr: list[int]
    log_start_offset: int = Field(description="-1 when the answering broker holds no replica")
    high_watermark: int = Field(description="-1 when the answering broker holds no replica")


class TopicOut(BaseModel):
    model_config = SdkShape
    name: str
    topic_id: int
    kind: str
    ordering: str
    retention_ms: int
    retention_bytes: int
    created_ms: int
    queue: dict | None = Field(None, description="queue topics: max_deliveries, backoff, dead_letter_topic, ...")
    compaction: dict | None = Field(None, description="stream topics: cleanup_policy, min_compaction_lag_ms, ...")
    partitions: list[PartitionOut]


class TopicListAnswer(BaseModel):
    topics: list[TopicOut]


class BrokerOut(BaseModel):
    model_config = SdkShape
    broker_id: int
    address: str
    raft_address: str
    alive: bool
    state: str = Field("active", description="active, or draining: it hands its leaderships away")


class ClusterAnswer(BaseModel):
    model_config = SdkShape
    brokers: list[BrokerOut]
    controller_id: int | None
    topics: list[TopicOut]
    answering_broker_id: int


class MemberOut(BaseModel):
    model_config = SdkShape
    member_id: str
    client_id: str
    topics: list[str]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    joined_ms: int
    owned: list[tuple[str, int]]
    target: list[tuple[str, int]]


class PartitionLagOut(BaseModel):
    model_config = SdkShape
    topic: str
    partition: int
    owner: str | None
    committed_offset: int | None
    log_start_offset: int
    high_watermark: int
    lag_records: int | None
    lag_s: float | None


class GroupOut(BaseModel):
    model_config = SdkShape
    name: str
    generation: int
    state: str
    topics: list[str]
    members: list[MemberOut]
    created_ms: int
    changed_ms: int
    partitions: list[PartitionLagOut] = Field(description="describe only: committed offsets and lag")
    lag_records: int | None = None


class GroupListAnswer(BaseModel):
    groups: list[GroupOut]


class TableEntryOut(BaseModel):
    key: str | None = None
    key_b64: str | None = None
    value: str | None = None
    value_b64: str | None = None
    revision: int = Field(description="the offset of the key's record")
    partition: int
    timestamp_ms: int
    deleted: bool = False


class TableKeysAnswer(BaseModel):
    keys: list[str] = Field(description="UTF-8 keys; keys that are not UTF-8 are in keys_b64")
    keys_b64: list[str] = []
    more: bool = Field(description="more keys follow: ask again with start_after = the last key")


class RevisionAnswer(BaseModel):
    key: str
    revision: int


class TableHistoryAnswer(BaseModel):
    entries: list[TableEntryOut]


class TableWatchAnswer(BaseModel):
    events: list[TableEntryOut]
    position: str = Field(description="pass as `after` to the next poll: partition:revision pairs")


class TableListAnswer(BaseModel):
    tables: list[TopicOut]
