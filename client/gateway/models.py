"""Request bodies of the HTTP API (pydantic models: they validate input and document it in /openapi.json).

Bytes travel as UTF-8 text (`value`, `key`, `headers`) or base64 (`value_b64`, `key_b64`, `headers_b64`).
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from raftbus.gateway import settings

Strict = ConfigDict(extra="forbid")
CLEANUP_POLICY = "^(delete|compact|compact,delete)$"


class Payload(BaseModel):
    model_config = Strict
    value: str | None = None
    value_b64: str | None = None
    key: str | None = None
    key_b64: str | None = None
    headers: dict[str, str] | None = None
    headers_b64: dict[str, str] | None = None


class RecordIn(Payload):
    partition: int | None = Field(None, ge=0, description="else by key (murmur2), else sticky round-robin")


class ProduceBody(BaseModel):
    model_config = Strict
    records: list[RecordIn] = Field(max_length=settings.RECORDS_PER_REQUEST_MAX)


class MessageIn(Payload):
    priority: int | None = Field(None, description="lower first (priority ordering, and within a fair group)")
    group: str | None = Field(None, description="fair-ordering group, hierarchical on '.'; also routes")
    deliver_at_ms: int | None = Field(None, ge=0, description="deliver no earlier than this epoch time")
    delay_ms: int | None = Field(None, ge=0, description="deliver no earlier than this long from now")
    idempotency_key: str | None = None
    partition: int | None = Field(None, ge=0)


class EnqueueBody(BaseModel):
    model_config = Strict
    messages: list[MessageIn] = Field(max_length=settings.MESSAGES_PER_REQUEST_MAX)


class LeaseBody(BaseModel):
    model_config = Strict
    max: int = Field(10, ge=1, le=settings.LEASE_MESSAGES_MAX)
    visibility_ms: int = Field(30_000, ge=1, description="the lease's length")
    wait_ms: int = Field(0, ge=0, le=settings.WAIT_MS_MAX, description="long-poll this long for a due message")
    partition: int | None = Field(None, ge=0, description="lease from this partition only")


class LeasesBody(BaseModel):
    model_config = Strict
    leases: list[str] = Field(max_length=settings.LEASES_PER_REQUEST_MAX, description="`lease` of leased messages")


class NackBody(LeasesBody):
    delay_ms: int | None = Field(None, ge=0, description="ready again after this long; else the topic's backoff")
    reason: str = ""


class ExtendBody(LeasesBody):
    visibility_ms: int = Field(ge=1, description="each lease now ends this long from now")


class ChangePriorityBody(BaseModel):
    model_config = Strict
    priority: int | None = None
    deliver_at_ms: int | None = Field(None, ge=0)


class RedriveBody(BaseModel):
    model_config = Strict
    max: int | None = Field(None, ge=1, description="move at most this many (default: all)")


class TopicCreateBody(BaseModel):
    model_config = Strict
    name: str
    partitions: int = 3
    replication_factor: int = 3
    kind: str = Field("stream", pattern="^(stream|queue)$")
    ordering: str | None = Field(None, pattern="^(priority|fair)$")
    retention_ms: int | None = None
    retention_bytes: int | None = None
    max_deliveries: int | None = None
    backoff_base_ms: int | None = None
    backoff_max_ms: int | None = None
    max_in_flight_per_group: int | None = None
    idempotency_window_ms: int | None = None
    cleanup_policy: str | None = Field(None, pattern=CLEANUP_POLICY, description="stream topics")
    min_compaction_lag_ms: int | None = Field(None, description="stream topics (docs/compaction.md)")
    max_compaction_lag_ms: int | None = None
    delete_retention_ms: int | None = None
    segment_bytes: int | None = None


class TopicAlterBody(BaseModel):
    """Only the fields given change."""

    model_config = Strict
    partitions: int | None = Field(None, description="the new total (grow only)")
    retention_ms: int | None = None
    retention_bytes: int | None = None
    max_deliveries: int | None = Field(None, description="queue topics")
    backoff_base_ms: int | None = Field(None, description="queue topics")
    backoff_max_ms: int | None = Field(None, description="queue topics")
    max_in_flight_per_group: int | None = Field(None, description="queue topics")
    idempotency_window_ms: int | None = Field(None, description="queue topics")
    cleanup_policy: str | None = Field(None, pattern=CLEANUP_POLICY, description="stream topics")
    min_compaction_lag_ms: int | None = Field(None, description="stream topics (docs/compaction.md)")
    max_compaction_lag_ms: int | None = None
    delete_retention_ms: int | None = None
    segment_bytes: int | None = None


class TableCreateBody(BaseModel):
    """A key-value table: a compacted stream topic (cleanup_policy compact unless given)."""

    model_config = Strict
    name: str
    partitions: int = 1
    replication_factor: int = 3
    cleanup_policy: str = Field("compact", pattern="^compact(,delete)?$")
    min_compaction_lag_ms: int | None = None
    max_compaction_lag_ms: int | None = None
    delete_retention_ms: int | None = None
    segment_bytes: int | None = None


class TablePutBody(BaseModel):
    model_config = Strict
    value: str | None = None
    value_b64: str | None = None
    expected_revision: int | None = Field(None, ge=-1, description="compare-and-set: the key's revision now "
                                                                   "(-1: it has no value)")


class InstanceCreateBody(BaseModel):
    model_config = Strict
    name: str | None = Field(None, description="the instance id (default: a random one)")
    auto_offset_reset: str = Field("latest", pattern="^(earliest|latest)$")
    enable_auto_commit: bool = False
    session_timeout_ms: int | None = Field(None, ge=1)
    max_poll_records: int | None = Field(None, ge=1)


class SubscriptionBody(BaseModel):
    model_config = Strict
    topics: list[str] = Field(min_length=1)


class OffsetIn(BaseModel):
    model_config = Strict
    topic: str
    partition: int = Field(ge=0)
    offset: int = Field(ge=0, description="the next offset to read")


class CommitBody(BaseModel):
    model_config = Strict
    offsets: list[OffsetIn] | None = Field(None, description="default: every owned partition's position")


class SeekBody(BaseModel):
    model_config = Strict
    offsets: list[OffsetIn] = Field(description="read each partition from this offset on (owned partitions only)")


class TopicPartitionIn(BaseModel):
    model_config = Strict
    topic: str
    partition: int = Field(ge=0)


class SeekEdgeBody(BaseModel):
    model_config = Strict
    partitions: list[TopicPartitionIn] | None = Field(None, description="default: every owned partition")
