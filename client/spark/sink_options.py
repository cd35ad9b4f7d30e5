"""The options of the raftbus Spark sink (df.write / writeStream .format("raftbus")), parsed and checked once.

`bootstrap` (host:port[,...]; `kafka.bootstrap.servers` is accepted too) and `topic` (every row goes there;
without it each row names its topic in a `topic` column, as in Kafka's sink). The producer's settings, with
the SDK's names in Spark's camel case: `batchBytesMax` (bytes per produce request), `bufferBytesMax`
(bytes a task holds unacknowledged before it waits), `requestTimeoutMs`, `deliveryTimeoutMs` (how long one
batch may take, retries included), `retries`, `retryBackoffMs`, `metadataMaxAgeMs`. `sortWithinTask`
(default false): each task sorts its rows before writing them, so a replayed task cuts the same produce
batches even when its rows arrive in another order (after a shuffle); it holds the task's rows in memory.
Queue topics:
`idempotencyKeys` (default true: every queue message without an `idempotency_key` column value gets one
derived from the write's identity, see sink_identity). Option names are case-insensitive.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from raftbus.client import settings
from raftbus.client.spark.options import parse_bool, parse_positive


@dataclass(frozen=True, slots=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    batch_bytes_max: int
    buffer_bytes_max: int
    request_timeout_ms: int
    delivery_timeout_ms: int
    retries: int
    retry_backoff_ms: int
    metadata_max_age_ms: int
    idempotency_keys: bool
    sort_within_task: bool


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check every option the sink knows; InvalidArgument names the first bad one."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    bootstrap = opts.get("bootstrap") or opts.get("kafka.bootstrap.servers") or settings.bootstrap_default()
    settings.parse_bootstrap(bootstrap)
    batch_bytes_max = parse_positive("batchBytesMax", opts.get("batchbytesmax"), settings.BATCH_BYTES_MAX)
    return SinkOptions(
        bootstrap=bootstrap,
        topic=opts.get("topic", "").strip() or None,
        batch_bytes_max=batch_bytes_max,
        buffer_bytes_max=parse_positive("bufferBytesMax", opts.get("bufferbytesmax"),
                                        max(settings.BUFFER_BYTES_MAX, batch_bytes_max), batch_bytes_max),
        request_timeout_ms=parse_positive("requestTimeoutMs", opts.get("requesttimeoutms"),
                                          settings.REQUEST_TIMEOUT_MS),
        delivery_timeout_ms=parse_positive("deliveryTimeoutMs", opts.get("deliverytimeoutms"),
                                           settings.DELIVERY_TIMEOUT_MS),
        retries=parse_positive("retries", opts.get("retries"), settings.RETRIES, 0),
        retry_backoff_ms=parse_positive("retryBackoffMs", opts.get("retrybackoffms"), settings.RETRY_BACKOFF_MS),
        metadata_max_age_ms=parse_positive("metadataMaxAgeMs", opts.get("metadatamaxagems"),
                                           settings.METADATA_MAX_AGE_MS),
        idempotency_keys=parse_bool("idempotencyKeys", opts.get("idempotencykeys"), True),
        sort_within_task=parse_bool("sortWithinTask", opts.get("sortwithintask"), False),
    )
