"""Who a sink task writes as: a producer id that every attempt of the same piece of work derives alike.

Streaming: the query's id (kept in the checkpoint, the same after a restart), the micro-batch id and the
task's partition id, which Spark hands every task of a micro-batch as local properties and the task
context. A task retry and a micro-batch replayed after a driver restart get the same id, so the broker
recognises their batches (sink_sender); a new micro-batch or another task gets another.

Batch writes: a random write id drawn when the DataFrame write starts (on the driver) and the task's
partition id, so a retried task is recognised; writing the DataFrame again is a new write.
"""
from __future__ import annotations

import hashlib
import uuid

from raftbus.client import settings
from raftbus.client.errors import InvalidArgument

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
_DOMAIN = "raftbus-spark-sink/1"


def producer_id(*parts: object) -> bytes:
    """The 16-byte producer id of one piece of work named by `parts`."""
    name = "/".join([_DOMAIN, *map(str, parts)]).encode()
    return hashlib.blake2b(name, digest_size=settings.PRODUCER_ID_BYTES).digest()


def new_write_id() -> str:
    return uuid.uuid4().hex


def batch_task_producer_id(write_id: str) -> bytes:
    """The producer id of this task of the batch write `write_id` (called in the task)."""
    from pyspark import TaskContext

    return producer_id("write", write_id, TaskContext.get().partitionId())


def stream_task_producer_id() -> bytes:
    """The producer id of this task of the running micro-batch (called in the task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    query_id, batch_id = context.getLocalProperty(QUERY_ID_PROPERTY), context.getLocalProperty(BATCH_ID_PROPERTY)
    if not query_id or batch_id is None:
        raise InvalidArgument("the raftbus streaming sink found no query id or micro-batch id in the task "
                              "(continuous processing is not supported; use micro-batch triggers)")
    return producer_id("stream", query_id, batch_id, context.partitionId())


def queue_idempotency_key(task_producer_id: bytes, index: int) -> str:
    """The idempotency key of the task's `index`-th queue message (the same on every attempt)."""
    return f"spark-{task_producer_id.hex()}-{index}"
