"""The JetStream streams and consumers of the NATS benchmark, and how to read a stream's leader and size."""
from __future__ import annotations

import asyncio
import time

import nats
import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig

from raftbus.client.errors import Unavailable

SYSTEM = "nats"
REPLICAS = 3
STREAM, SUBJECT_PREFIX = "BENCH", "bench"
QUEUE_STREAM, QUEUE_SUBJECT, QUEUE_CONSUMER = "QUEUE", "queue.jobs", "workers"
FAILOVER_STREAM, FAILOVER_SUBJECT = "FAILOVER", "failover.records"
CONSUMER_ACKS_PENDING_MAX = 100_000
STREAM_READY_TIMEOUT_MS = 60_000
STREAM_READY_POLL_MS = 250


def partition_subject(partition: int) -> str:
    return f"{SUBJECT_PREFIX}.{partition}"


def partition_consumer(partition: int) -> str:
    return f"part{partition}"


async def add_streams(urls: tuple[str, ...], partitions: int) -> None:
    """The benchmark's streams and consumers, retried while JetStream elects its meta leader."""
    deadline = time.monotonic() + STREAM_READY_TIMEOUT_MS / 1000
    while True:
        try:
            return await _add_streams(urls, partitions)
        except (nats.errors.Error, asyncio.TimeoutError) as exc:
            if time.monotonic() > deadline:
                raise Unavailable(f"JetStream not ready after {STREAM_READY_TIMEOUT_MS} ms: {exc!r}") from None
            await asyncio.sleep(STREAM_READY_POLL_MS / 1000)


async def _add_streams(urls: tuple[str, ...], partitions: int) -> None:
    nc = await nats.connect(servers=list(urls))
    try:
        jsm = nc.jsm()
        common = {"storage": StorageType.FILE, "num_replicas": REPLICAS}
        await jsm.add_stream(StreamConfig(name=STREAM, subjects=[f"{SUBJECT_PREFIX}.>"], **common))
        await jsm.add_stream(StreamConfig(name=QUEUE_STREAM, subjects=[QUEUE_SUBJECT],
                                          retention=RetentionPolicy.WORK_QUEUE, **common))
        await jsm.add_stream(StreamConfig(name=FAILOVER_STREAM, subjects=[FAILOVER_SUBJECT], **common))
        for p in range(partitions):
            await jsm.add_consumer(STREAM, ConsumerConfig(
                durable_name=partition_consumer(p), filter_subject=partition_subject(p), ack_policy=AckPolicy.ALL,
                max_ack_pending=CONSUMER_ACKS_PENDING_MAX))
        await jsm.add_consumer(QUEUE_STREAM, ConsumerConfig(
            durable_name=QUEUE_CONSUMER, ack_policy=AckPolicy.EXPLICIT, max_ack_pending=CONSUMER_ACKS_PENDING_MAX))
    finally:
        await nc.close()


async def stream_state(urls: tuple[str, ...], stream: str) -> tuple[str, int]:
    """(leader server name, messages held) of `stream`."""
    nc = await nats.connect(servers=list(urls))
    try:
        info = await nc.jsm().stream_info(stream)
        return info.cluster.leader, info.state.messages
    finally:
        await nc.close()
