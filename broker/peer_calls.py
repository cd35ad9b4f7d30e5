"""Calls from this broker to a partition's leader on another broker, through that broker's client port.

The queue forwarder (dead letters, broker/queues/forwarder.py) and the Kafka port's offset forwarder
(broker/groups/offset_forwarder.py) reach partitions they do not lead the way a client does: an SDK `Router` over
the registered brokers' client addresses (this broker's own before any is registered), made on first use, with the
broker's own credentials, and one gRPC stub of `stub_class` per connection.
"""
from __future__ import annotations

import threading
from typing import Callable

from raftbus.client.router import Router


class PeerCalls:
    def __init__(self, context, stub_class, *, timeout_s: float, client_address: str,
                 credentials: dict | None = None):
        self.context = context
        self.stub_class = stub_class
        self.timeout_s = timeout_s
        self.client_address = client_address
        self.credentials = credentials or {}  # the SDK's tls_ca/tls_cert/tls_key/token: the broker's own
        self._lock = threading.Lock()
        self._router: Router | None = None
        self._stubs: dict[str, object] = {}

    def call(self, topic: str, partition: int, fn: Callable):
        """`fn(stub)` at the partition's leader, retried and rerouted as the SDK's router does."""
        return self._router_for_peers().call_partition(topic, partition, lambda conn: fn(self._stub(conn)))

    def _router_for_peers(self) -> Router:
        with self._lock:
            if self._router is None:
                addresses = [b.address for b in self.context.metadata_sm.brokers().values()]
                self._router = Router(addresses or [self.client_address],
                                      request_timeout_ms=int(self.timeout_s * 1000), **self.credentials)
            return self._router

    def _stub(self, conn):
        with self._lock:
            stub = self._stubs.get(conn.address)
            if stub is None:
                stub = self._stubs[conn.address] = self.stub_class(conn.channel)
            return stub

    def close(self) -> None:
        with self._lock:
            router, self._router = self._router, None
            self._stubs.clear()
        if router is not None:
            router.close()
