"""The SDK clients a gateway process shares between requests, and how a request gets them.

The gateway keeps no state of its own about topics, offsets or messages: every request turns into SDK calls on
one Router (metadata cache and pooled channels), one Producer (records of concurrent requests share batches),
one Reader and one Queues. Consumer instances (consumer-group members held for HTTP clients) are the only
per-client state; see instances.py.

Credentials: a request may carry `Authorization: Bearer <token>`. `Clients.for_token` is the one place where
the token meets the SDK. The SDK takes no credentials yet, so every request uses the shared clients and the
token is not sent to the brokers.
"""
from __future__ import annotations

from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from raftbus.client import Admin, Producer, Queues, Reader
from raftbus.client.router import Router

from raftbus.client.http import settings
from raftbus.client.http.instances import ConsumerInstances
from raftbus.client.http.leases import TopicLeaser


@dataclass
class Clients:
    bootstrap: str
    router: Router
    admin: Admin
    reader: Reader
    queues: Queues
    producer: Producer
    consumers: ConsumerInstances
    leaser: TopicLeaser

    @classmethod
    def connect(cls, bootstrap: str) -> "Clients":
        router = Router(bootstrap)
        queues = Queues(router=router)
        return cls(bootstrap, router, Admin(router=router), Reader(router=router), queues,
                   Producer(bootstrap, linger_ms=settings.PRODUCE_LINGER_MS), ConsumerInstances(bootstrap),
                   TopicLeaser(queues))

    def for_token(self, token: str | None) -> "Clients":
        """The clients that act for a request bearing `token` (None: no Authorization header).

        The SDK has no credentials argument yet, so this returns the shared clients for every token; when it
        has one, clients built with the token (cached per token) are returned here.
        """
        return self

    def close(self) -> None:
        self.consumers.close()
        self.producer.close(timeout_s=10)
        self.queues.close()
        self.router.close()


bearer = HTTPBearer(auto_error=False, description="passed to the cluster once the SDK carries credentials")


def clients(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Clients:
    """FastAPI dependency: the clients for this request's credentials."""
    token = credentials.credentials if credentials is not None else None
    return request.app.state.clients.for_token(token)
