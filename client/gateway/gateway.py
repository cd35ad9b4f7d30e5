"""The SDK clients a gateway process shares between requests, and how a request gets them.

The gateway keeps no state of its own about topics, offsets or messages: every request turns into SDK calls on
one Router (metadata cache and pooled channels), one Producer (records of concurrent requests share batches),
one Reader and one Queues. Consumer instances (consumer-group members held for HTTP clients) are the only
per-client state; see instances.py.

Credentials: a request without `Authorization: Bearer <token>` acts with the gateway's own credentials (its
environment: RAFTBUS_TLS_CA, RAFTBUS_TOKEN_FILE, ...); a request with one acts as that token's principal:
`Clients.for_token` gives it clients built with the token (and the environment's TLS trust), kept for the
TOKEN_CLIENTS_MAX tokens used last, so the brokers authenticate and authorize every call as that principal.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from raftbus.client import Admin, Producer, Queues, Reader
from raftbus.client.credentials import TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV
from raftbus.client.router import Router

from raftbus.gateway import settings
from raftbus.gateway.instances import ConsumerInstances
from raftbus.gateway.leases import TopicLeaser


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
    _by_token: OrderedDict = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def connect(cls, bootstrap: str, credentials: dict | None = None) -> "Clients":
        """Clients of the cluster at `bootstrap`; `credentials` (tls_ca, tls_cert, tls_key, token) default to the
        environment's."""
        credentials = credentials or {}
        router = Router(bootstrap, **credentials)
        queues = Queues(router=router)
        return cls(bootstrap, router, Admin(router=router), Reader(router=router), queues,
                   Producer(bootstrap, linger_ms=settings.PRODUCE_LINGER_MS, **credentials),
                   ConsumerInstances(bootstrap, credentials=credentials), TopicLeaser(queues))

    def for_token(self, token: str | None) -> "Clients":
        """The clients that act for a request bearing `token`: these shared ones without a token, else clients
        built with it (the least recently used of more than TOKEN_CLIENTS_MAX are closed)."""
        if token is None:
            return self
        with self._lock:
            found = self._by_token.get(token)
            if found is not None:
                self._by_token.move_to_end(token)
                return found
        made = Clients.connect(self.bootstrap, {**tls_from_environment(), "token": token})
        evicted = []
        with self._lock:
            found = self._by_token.setdefault(token, made)
            while len(self._by_token) > settings.TOKEN_CLIENTS_MAX:
                evicted.append(self._by_token.popitem(last=False)[1])
        for clients in ([made] if found is not made else []) + evicted:
            clients.close()
        return found

    def close(self) -> None:
        with self._lock:
            per_token, self._by_token = list(self._by_token.values()), OrderedDict()
        for clients in per_token:
            clients.close()
        self.consumers.close()
        self.producer.close(timeout_s=10)
        self.queues.close()
        self.router.close()



def tls_from_environment() -> dict:
    """The gateway's own TLS trust and client certificate (RAFTBUS_TLS_CA, _CERT, _KEY), for per-token clients."""
    found = {"tls_ca": os.environ.get(TLS_CA_ENV), "tls_cert": os.environ.get(TLS_CERT_ENV),
             "tls_key": os.environ.get(TLS_KEY_ENV)}
    return {name: value for name, value in found.items() if value}

bearer = HTTPBearer(auto_error=False, description="a raftbus token: the request acts as its principal")


def clients(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Clients:
    """FastAPI dependency: the clients for this request's credentials."""
    token = credentials.credentials if credentials is not None else None
    return request.app.state.clients.for_token(token)
