"""The Kafka port's listener: an asyncio loop on a thread of its own, never the Raft loop.

Every connection is served on this one loop (broker/kafka/connection.py); handlers call the services' submit
paths, which hand a command to the Raft loop and return a future, and await that future here, so a produce
waiting for its commit holds no thread. Calls that only exist as blocking ones (topic administration, which
waits for the metadata group) run on a small executor. At most `connections_max` connections are open at once,
and `connections_per_address_max` from one source address: one more is accepted and closed at once.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from raftbus.broker.kafka.connection import Connection
from raftbus.broker.kafka.session import Session
from raftbus.client import errors

from raftbus.broker.security.principals import certificate_principal
from raftbus.broker.security.tls import certificate_subject

log = logging.getLogger(__name__)
BLOCKING_CALLS_MAX = 4  # threads for the calls that block (topic administration)


class KafkaLimits(NamedTuple):
    """The Kafka port's bounds (settings kafka_*)."""

    connections_max: int = 1000
    connections_per_address_max: int = 100
    unauthenticated_request_bytes_max: int = 64 * 1024
    in_flight_per_connection_max: int = 100
    request_bytes_max: int = 100 * 1024 * 1024
    request_read_timeout_ms: int = 30_000
    idle_ms: int = 600_000
    fetch_sessions_max: int = 1000
    authentication_timeout_ms: int = 10_000


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


class KafkaListener:
    def __init__(self, listen: str, limits: KafkaLimits, policy=None, ssl_context=None, reuse_port: bool = False,
                 certificate_rules: tuple = ()):
        self.listen = listen
        self.reuse_port = reuse_port  # SO_REUSEPORT: the port may be held reserved for this broker
        self.limits = limits
        self.policy = policy  # () -> AccessPolicy when authorization is on (session.py)
        self.ssl_context = ssl_context  # TLS with the client port's certificate (SSL and SASL_SSL), or None
        self.certificate_rules = certificate_rules  # tls_principal_rules: a client certificate's principal, if any
        self.router = None  # set by the assembly (broker/kafka/apis.py) before start
        self.loop = asyncio.new_event_loop()
        self.blocking = ThreadPoolExecutor(max_workers=BLOCKING_CALLS_MAX, thread_name_prefix="raftbus-kafka-admin")
        self.port: int | None = None
        self.connections = 0
        self._per_address: dict[str, int] = {}
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None

    def start(self, name: str = "raftbus-kafka") -> int:
        """Bind and serve on a new thread; returns the bound port (useful with port 0)."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run():
            asyncio.set_event_loop(self.loop)
            try:
                self.loop.run_until_complete(self._bind())
            except BaseException as exc:  # reported to start()
                failure.append(exc)
                ready.set()
                return
            ready.set()
            self.loop.run_until_complete(self._stopping.wait())
            self.loop.run_until_complete(self._shutdown())

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self.port

    async def _bind(self) -> None:
        self._stopping = asyncio.Event()
        host, port = split_address(self.listen)
        tls = {"ssl": self.ssl_context, "ssl_handshake_timeout": self.limits.authentication_timeout_ms / 1000} \
            if self.ssl_context is not None else {}
        self._server = await asyncio.start_server(self._accept, host, port, limit=64 * 1024, backlog=512,
                                                  reuse_port=self.reuse_port or None, **tls)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = peer[0] if peer else "?"
        peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        from_host = self._per_address.get(host, 0)
        if self.connections >= self.limits.connections_max or from_host >= self.limits.connections_per_address_max:
            log.warning("kafka connection refused: %s", f"kafka_connections_max={self.limits.connections_max} reached"
                        if self.connections >= self.limits.connections_max else
                        f"kafka_connections_per_address_max={self.limits.connections_per_address_max} reached for "
                        f"{host}", extra={"peer": peer})
            writer.close()
            return
        ssl_object = writer.get_extra_info("ssl_object")
        try:
            principal = self.certificate_principal(ssl_object)
        except errors.Unauthenticated as exc:
            log.warning("kafka connection refused: %s", exc.message, extra={"peer": peer})
            writer.close()
            return
        self.connections += 1
        self._per_address[host] = from_host + 1
        session = Session(peer, self.policy, tls=ssl_object is not None, principal=principal)
        try:
            await Connection(reader, writer, self.router, session, self.limits).serve()
        except asyncio.CancelledError:  # the listener stops: end quietly (asyncio's stream callback would log it)
            writer.close()
        except Exception:
            log.exception("kafka connection failed", extra={"peer": peer})
            writer.close()
        finally:
            self.connections -= 1
            left = self._per_address[host] - 1
            if left:
                self._per_address[host] = left
            else:
                del self._per_address[host]

    def certificate_principal(self, ssl_object) -> str | None:
        """The principal a verified client certificate names through `tls_principal_rules`, exactly as on the
        client port (none without rules or a certificate); Unauthenticated for a reserved or invalid one."""
        if ssl_object is None or not self.certificate_rules:
            return None
        subject = certificate_subject(ssl_object.getpeercert(binary_form=True))
        return certificate_principal(self.certificate_rules, subject) if subject else None

    async def _shutdown(self) -> None:
        self._server.close()
        tasks = [t for t in asyncio.all_tasks(self.loop) if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def run_blocking(self, fn, *args):
        """Run a blocking service call on the listener's executor and await it."""
        return await self.loop.run_in_executor(self.blocking, fn, *args)

    def call_soon(self, fn, *args) -> None:
        """Schedule `fn` on the listener's loop from any thread (a no-op once it has stopped)."""
        if not self.loop.is_closed():
            try:
                self.loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:
                pass

    def stop(self) -> None:
        if self._thread is None or self._stopping is None:
            return
        self.loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(5.0)
        self.blocking.shutdown(wait=False, cancel_futures=True)
        if not self._thread.is_alive():
            self.loop.close()
