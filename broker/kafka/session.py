"""Who is asking on one Kafka connection, and the authorization hook every operation goes through.

A connection starts with no principal, or, over mutual TLS, with the principal its client certificate names
through `tls_principal_rules` (as on the client port). SASL (SaslHandshake, SaslAuthenticate: PLAIN with a raftbus token, SCRAM-SHA-256
and SCRAM-SHA-512 with a token's verifiers) sets the principal. With `auth_enabled` off every operation is
allowed; with it on, an operation is allowed only when the connection's principal holds an ACL for it
(broker/security's policy, the same table the gRPC port checks), and a connection without a principal may send
nothing but ApiVersions and SASL (the connection enforces it, broker/kafka/connection.py).
"""
from __future__ import annotations

import asyncio
import ipaddress

from raftbus.broker.kafka import codes

TOPIC, GROUP, CLUSTER = "topic", "group", "cluster"
PRODUCE, CONSUME, ADMIN = "produce", "consume", "admin"
DESCRIBE = "describe"  # Kafka's Describe (metadata, configs): implied by any operation on the resource
_DENIED = {TOPIC: codes.TOPIC_AUTHORIZATION_FAILED, GROUP: codes.GROUP_AUTHORIZATION_FAILED,
           CLUSTER: codes.CLUSTER_AUTHORIZATION_FAILED}


class Session:
    """One connection's identity: its peer address, client id, transport and principal."""

    __slots__ = ("peer", "client_id", "principal", "_policy", "commits", "tls", "mechanism", "exchange", "closing",
                 "requests_read", "_next_request")

    def __init__(self, peer: str, policy, *, tls: bool = False, principal: str | None = None):
        self.peer = peer
        self.client_id: str | None = None
        self.principal: str | None = principal  # a client certificate's (tls_principal_rules), until SASL names another
        self._policy = policy  # () -> AccessPolicy, or None when authorization is off
        self.tls = tls
        self.mechanism: str | None = None  # chosen by SaslHandshake
        self.exchange = None  # the SCRAM exchange in progress
        self.closing = False  # close once the answer in hand is sent (a failed authentication)
        # a connection's OffsetCommits are carried out one at a time, in the order they came (as Kafka's brokers
        # answer one request of a connection at a time): a later commit never lands before an earlier one
        self.commits = asyncio.Lock()
        self.requests_read = 0  # the connection's requests so far; a request's `sequence` is its place among them
        self._next_request: asyncio.Future | None = None

    def request_read(self) -> int:
        """The connection read one more request: its sequence number. Wakes whatever waits for a later request."""
        self.requests_read += 1
        self._wake()
        return self.requests_read

    def closed(self) -> None:
        """The connection stopped reading: nothing more comes, so nothing waits for it."""
        self.requests_read += 1
        self._wake()

    def later_request(self, sequence: int) -> asyncio.Future:
        """Done once the connection has read a request after request `sequence` (or stopped reading): an answer
        that could wait (a held Heartbeat) must not hold back the answers queued behind it."""
        if self.requests_read > sequence:
            future = asyncio.get_running_loop().create_future()
            future.set_result(None)
            return future
        if self._next_request is None:
            self._next_request = asyncio.get_running_loop().create_future()
        return self._next_request

    def _wake(self) -> None:
        if self._next_request is not None:
            if not self._next_request.done():
                self._next_request.set_result(None)
            self._next_request = None

    @property
    def auth_required(self) -> bool:
        return self._policy is not None

    @property
    def authenticated(self) -> bool:
        """Whether the connection may send more than ApiVersions and SASL."""
        return self._policy is None or self.principal is not None

    @property
    def host(self) -> str:
        return self.peer.rpartition(":")[0].strip("[]")

    @property
    def client_host(self) -> str:
        """The peer's address as Kafka's DescribeGroups shows it ("/127.0.0.1")."""
        return "/" + self.host

    @property
    def loopback(self) -> bool:
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def authenticated(self) -> bool:
        """Whether this connection may send requests of the authenticated size: auth is off, or it has a principal."""
        return self._policy is None or self.principal is not None

    def denied(self, resource_type: str, name: str, operation: str) -> int:
        """0 when the principal may do `operation` on the resource; the Kafka authorization error otherwise."""
        if self._policy is None:
            return codes.NONE
        if self.principal is not None:
            policy = self._policy()
            for wanted in (PRODUCE, CONSUME, ADMIN) if operation == DESCRIBE else (operation,):
                if policy.allows(self.principal, resource_type, name, wanted):
                    return codes.NONE
        return _DENIED[resource_type]
