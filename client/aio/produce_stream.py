"""AsyncProducer's network side: one grpc.aio bidi ProduceStream per broker, answers matched by `request_id`.

As in the sync SDK (client/produce_stream.py) the broker appends a stream's batches in arrival order and answers
each once it is committed on a majority and applied. A stream that ends fails every request it still holds
with the typed error; a request unanswered within the request timeout fails with REQUEST_TIMED_OUT and closes
its stream (a hanging broker must not hold batches forever). The caller retries through the router.
"""
from __future__ import annotations

import asyncio

import grpc

from raftbus.client.errors import RaftbusError, RequestTimedOut, Unavailable, error_from_rpc
from raftbus.client.produce_stream import response_error
from raftbus.client.router import Connection
from raftbus.client.wire import raftbus_pb2 as pb

from raftbus.client.aio.router import AsyncRouter

_END = None
SWEEP_INTERVAL_S = 0.1  # how often a stream looks for requests past their deadline


class _AioStream:
    """One open ProduceStream call and the requests it has not answered yet."""

    def __init__(self, conn: Connection, timeout_s: float):
        self.address = conn.address
        self.closed = False
        self.timeout_s = timeout_s
        self._outbox: asyncio.Queue = asyncio.Queue()
        self._waiting: dict[int, tuple[float, asyncio.Future]] = {}  # in send order: the first is the oldest
        self._call = conn.log.ProduceStream(self._requests())
        loop = asyncio.get_running_loop()
        self._reader = loop.create_task(self._read())
        self._sweeper = loop.create_task(self._sweep())

    async def _requests(self):
        while (request := await self._outbox.get()) is not _END:
            yield request

    async def request(self, request: pb.ProduceRequest) -> pb.ProduceResponse:
        if self.closed:
            raise Unavailable(f"produce stream to {self.address} is closed")
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        self._waiting[request.request_id] = (loop.time() + self.timeout_s, answer)
        self._outbox.put_nowait(request)
        return await answer

    async def _sweep(self) -> None:
        """Close the stream when its oldest unanswered request is past its deadline."""
        loop = asyncio.get_running_loop()
        while not self.closed:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            oldest = next(iter(self._waiting.values()), None)
            if oldest is not None and oldest[0] <= loop.time():
                self.fail(RequestTimedOut(f"no answer from {self.address} within the request timeout"))

    async def _read(self) -> None:
        reason: RaftbusError = Unavailable(f"produce stream to {self.address} ended")
        try:
            async for response in self._call:
                _, answer = self._waiting.pop(response.request_id, (None, None))
                if answer is None or answer.done():
                    continue
                error = response_error(response)
                answer.set_exception(error) if error else answer.set_result(response)
        except grpc.RpcError as exc:
            reason = error_from_rpc(exc)
        except asyncio.CancelledError:
            reason = Unavailable(f"produce stream to {self.address} was closed")
        except Exception as exc:  # a broken channel fails what the stream holds; the producer retries it
            reason = Unavailable(f"produce stream to {self.address} failed: {exc!r}")
        self.fail(reason)

    def fail(self, reason: RaftbusError) -> None:
        """Close the stream and fail every request it has not answered."""
        self.closed = True
        waiting, self._waiting = self._waiting, {}
        for _, answer in waiting.values():
            if not answer.done():
                answer.set_exception(reason)
        self._call.cancel()
        if self._sweeper is not asyncio.current_task():
            self._sweeper.cancel()

    async def close(self) -> None:
        self.closed = True
        self._outbox.put_nowait(_END)
        self._call.cancel()
        await asyncio.gather(self._reader, self._sweeper, return_exceptions=True)


class AsyncProduceStreams:
    """Pooled produce streams, one per broker address."""

    def __init__(self, router: AsyncRouter):
        self.router = router
        self._streams: dict[str, _AioStream] = {}

    async def produce(self, request: pb.ProduceRequest) -> pb.ProduceResponse:
        """Send one batch to its partition's leader and await its answer; typed errors on failure."""
        address = await self.router.leader_address(request.topic, request.partition)
        stream = self._streams.get(address)
        if stream is None or stream.closed:
            stream = self._streams[address] = _AioStream(self.router.connection(address), self.router.request_timeout_s)
        return await stream.request(request)

    async def close(self) -> None:
        streams, self._streams = list(self._streams.values()), {}
        await asyncio.gather(*(stream.close() for stream in streams), return_exceptions=True)
