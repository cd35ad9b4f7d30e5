"""One Kafka client connection: size-prefixed request frames in, responses out in request order.

Kafka requires a connection's responses in the order of its requests, and clients pipeline (librdkafka keeps up
to five produce requests in flight per connection with idempotence, more without). So each request is handled as
its own task as soon as it is read, and a writer sends the answers in arrival order as each completes: a produce
waits for its commit without holding back the reading of the next request. At most `in_flight_max` requests of
a connection are unanswered at once; past that the connection stops reading (TCP pushes back on the client).

A frame longer than `request_bytes_max` (or with a negative size), a frame whose header does not parse, or a
frame that stops arriving for `request_read_timeout_ms` closes the connection; so does `idle_ms` without a byte.

With authentication required (`auth_enabled`), a connection without a principal is held to a small surface until
SASL (or its client certificate) names one: ApiVersions, SaslHandshake and SaslAuthenticate only (anything else
closes it, as Kafka's brokers do), one request at a time, frames of at most `unauthenticated_request_bytes_max`,
and `authentication_timeout_ms` from the connection's start to get it done. A failed authentication is answered,
then the connection is closed.
"""
from __future__ import annotations

import asyncio
import logging
import struct

from raftbus.broker.kafka.schema import MalformedRequest, peek_ids

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")
SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 17, 18, 36
BEFORE_AUTHENTICATION = frozenset({SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE})


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, router, session, limits):
        self._reader = reader
        self._writer = writer
        self._router = router
        self.session = session
        self._limits = limits
        self._slots = asyncio.Semaphore(limits.in_flight_per_connection_max)
        self._answers: asyncio.Queue = asyncio.Queue()
        self._auth_deadline = asyncio.get_running_loop().time() + limits.authentication_timeout_ms / 1000

    async def serve(self) -> None:
        sender = asyncio.create_task(self._send_answers())
        try:
            await self._read_requests()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            pass
        except MalformedRequest as exc:
            log.info("kafka connection closed: %s", exc, extra={"peer": self.session.peer})
        finally:
            self.session.closed()
            await self._answers.put(None)
            try:
                await sender
            except (ConnectionError, asyncio.CancelledError):
                pass
            self._writer.close()

    async def _read_requests(self) -> None:
        limits, session = self._limits, self.session
        while True:
            await self._slots.acquire()
            authenticated = session.authenticated
            if authenticated:
                wait_s, limit, setting = limits.idle_ms / 1000, limits.request_bytes_max, "kafka_request_bytes_max"
            else:
                wait_s = self._auth_deadline - asyncio.get_running_loop().time()
                limit, setting = limits.unauthenticated_request_bytes_max, "kafka_unauthenticated_request_bytes_max"
                if wait_s <= 0:
                    log.info("kafka connection closed: not authenticated within kafka_authentication_timeout_ms",
                             extra={"peer": session.peer})
                    return
            head = await asyncio.wait_for(self._reader.readexactly(4), wait_s)
            (size,) = _SIZE.unpack(head)
            if size < 0 or size > limit:
                log.info("kafka connection closed: a %d-byte request frame (%s=%d)", size, setting, limit,
                         extra={"peer": session.peer})
                return
            frame = await asyncio.wait_for(self._reader.readexactly(size), limits.request_read_timeout_ms / 1000)
            if len(frame) < 8:
                raise MalformedRequest(f"a request frame of {len(frame)} bytes has no header")
            if not authenticated and peek_ids(frame)[0] not in BEFORE_AUTHENTICATION:
                log.info("kafka connection closed: API key %d before authentication", peek_ids(frame)[0],
                         extra={"peer": session.peer})
                return
            task = asyncio.create_task(self._router.answer(memoryview(frame), session, session.request_read()))
            await self._answers.put(task)
            if not authenticated:  # one request at a time until a principal is known
                await asyncio.wait([task])
            if session.closing:
                return

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
