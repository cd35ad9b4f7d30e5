"""Who is asking on one Kafka connection, and the authorization hook every operation goes through.

A connection starts with no principal. With `auth_enabled` off every operation is allowed; with it on, an
operation is allowed only when the connection's principal holds an ACL for it (broker/security's policy, the
same table the gRPC port checks), so a connection that has not authenticated is refused everything but
ApiVersions and Metadata's broker list. Authentication (SASL) sets `principal`.
"""
from __future__ import annotations

import asyncio

from raftbus.broker.kafka import codes

TOPIC, GROUP, CLUSTER = "topic", "group", "cluster"
PRODUCE, CONSUME, ADMIN = "produce", "consume", "admin"
DESCRIBE = CONSUME  # reading a topic's metadata or configs is what a consumer of it may do
_DENIED = {TOPIC: codes.TOPIC_AUTHORIZATION_FAILED, GROUP: codes.GROUP_AUTHORIZATION_FAILED,
           CLUSTER: codes.CLUSTER_AUTHORIZATION_FAILED}


class Session:
    """One connection's identity: its peer address, client id and principal."""

    __slots__ = ("peer", "client_id", "principal", "_policy", "commits")

    def __init__(self, peer: str, policy):
        self.peer = peer
        self.client_id: str | None = None
        self.principal: str | None = None
        self._policy = policy  # () -> AccessPolicy, or None when authorization is off
        # a connection's OffsetCommits are carried out one at a time, in the order they came (as Kafka's brokers
        # answer one request of a connection at a time): a later commit never lands before an earlier one
        self.commits = asyncio.Lock()

    @property
    def client_host(self) -> str:
        """The peer's address as Kafka's DescribeGroups shows it ("/127.0.0.1")."""
        return "/" + self.peer.rpartition(":")[0].strip("[]")

    def denied(self, resource_type: str, name: str, operation: str) -> int:
        """0 when the principal may do `operation` on the resource; the Kafka authorization error otherwise."""
        if self._policy is None:
            return codes.NONE
        if self.principal is not None and self._policy().allows(self.principal, resource_type, name, operation):
            return codes.NONE
        return _DENIED[resource_type]
