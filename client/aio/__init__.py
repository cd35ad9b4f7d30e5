"""raftbus for asyncio: `from raftbus.client.aio import AsyncProducer, AsyncConsumer, AsyncReader, AsyncQueueConsumer,
AsyncTable`.

The same semantics and typed errors (raftbus.client.errors) as the sync SDK, on grpc.aio channels; each object
belongs to the event loop it is first used on. See docs/asyncio.md.
"""
from raftbus.client.aio.consumer import AsyncConsumer
from raftbus.client.aio.producer import AsyncProducer
from raftbus.client.aio.queue_consumer import AsyncQueueConsumer
from raftbus.client.aio.reader import AsyncReader
from raftbus.client.aio.router import AsyncRouter
from raftbus.client.aio.table import AsyncTable

__all__ = ["AsyncConsumer", "AsyncProducer", "AsyncQueueConsumer", "AsyncReader", "AsyncRouter", "AsyncTable"]
