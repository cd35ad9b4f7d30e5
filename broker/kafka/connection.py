"""One Kafka client connection: size-prefixed request frames in, responses out in request order.

Kafka requires a connection's responses in the order of its requests, and clients pipeline (librdkafka keeps up
to five produce requests in flight per connection with idempotence, more without). So each request is handled as
its own task as soon as it is read, and a writer sends the answers in arrival order as each completes: a produce
waits for its commit without holding back the reading of the next request. At most `in_flight_max` requests of
a connection are unanswered at once; past that the connection stops reading (TCP pushes back on the client).

A frame longer than `request_bytes_max` (`unauthenticated_request_bytes_max` while auth is on and the connection
has no principal, so a stranger never makes the broker buffer more than that), or with a negative size, a frame
whose header does not parse, or a frame that stops arriving for `request_read_timeout_ms` closes the connection; so does `idle_ms` without a byte.
"""
from __future__ import annotations

import asyncio
import logging
import struct

from raftbus.broker.kafka.schema import MalformedRequest

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, router, session, limits):
        self._reader = reader
        self._writer = writer
        self._router = router
        self.session = session
        self._limits = limits
        self._slots = asyncio.Semaphore(limits.in_flight_per_connection_max)
        self._answers: asyncio.Queue = asyncio.Queue()

    async def serve(self) -> None:
        sender = asyncio.create_task(self._send_answers())
        try:
            await self._read_requests()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            pass
        except MalformedRequest as exc:
            log.info("kafka connection closed: %s", exc, extra={"peer": self.session.peer})
        finally:
            await self._answers.put(None)
            try:
                await sender
            except (ConnectionError, asyncio.CancelledError):
                pass
            self._writer.close()

    async def _read_requests(self) -> None:
        limits = self._limits
        while True:
            await self._slots.acquire()
            head = await asyncio.wait_for(self._reader.readexactly(4), limits.idle_ms / 1000)
            (size,) = _SIZE.unpack(head)
            if self.session.authenticated:
                bound, name = limits.request_bytes_max, "kafka_request_bytes_max"
            else:
                bound, name = limits.unauthenticated_request_bytes_max, "kafka_unauthenticated_request_bytes_max"
            if size < 0 or size > bound:
                log.info("kafka connection closed: a %d-byte request frame (%s=%d)", size, name, bound,
                         extra={"peer": self.session.peer})
                return
            frame = await asyncio.wait_for(self._reader.readexactly(size), limits.request_read_timeout_ms / 1000)
            if len(frame) < 8:
                raise MalformedRequest(f"a request frame of {len(frame)} bytes has no header")
            task = asyncio.create_task(self._router.answer(memoryview(frame), self.session))
            await self._answers.put(task)

    async def _send_answers(self) -> None:
        broken = False
        while True:
            task = await self._answers.get()
            if task is None:
                return
            try:
                answer = await task
            except MalformedRequest as exc:
                log.info("kafka connection closed: %s", exc, extra={"peer": self.session.peer})
                answer, broken = None, True
            except Exception:
                log.exception("kafka request failed", extra={"peer": self.session.peer})
                answer, broken = None, True
            finally:
                self._slots.release()
            if broken:
                self._close_now()
                return
            if answer is not None:
                self._writer.write(answer)
                await self._writer.drain()

    def _close_now(self) -> None:
        """Stop reading and close: queued requests are cancelled, nothing more is answered."""
        while not self._answers.empty():
            task = self._answers.get_nowait()
            if task is not None:
                task.cancel()
                self._slots.release()  # the reader, if it waits for a slot, wakes to find the connection closed
        self._writer.close()
