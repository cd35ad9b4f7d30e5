"""raftbus for asyncio: `from raftbus.client.aio import AsyncProducer`.

The same semantics and error types as the sync SDK, on grpc.aio channels and one event loop.
"""
from raftbus.client.aio.producer import AsyncProducer
from raftbus.client.aio.router import AsyncRouter

__all__ = ["AsyncProducer", "AsyncRouter"]
