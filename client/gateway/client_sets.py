"""SDK clients per bearer token, built only after the cluster accepted the token, and bounded.

A client set (`Clients`: one Router with pooled channels, a Producer, a Reader, Queues) carries one token on every
call, so the brokers authenticate and authorize each request as that token's principal. `ClientSets` keeps the
sets of the tokens used last: at most `sets_max` in all and `per_principal_max` per principal (a principal may
hold several tokens while they rotate); past either bound the least recently used set of that principal (else of
all) is closed. A set is built only for a token the cluster named a principal for (`TokenChecker`), so a token
the cluster refuses leaves nothing behind; a kept token is asked about again after `recheck_ms`, and a token
revoked meanwhile loses its set.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from raftbus.client import Admin, Producer, Queues, Reader, Table
from raftbus.client.errors import Unauthenticated, Unavailable
from raftbus.client.router import Router

from raftbus.gateway import settings
from raftbus.gateway.identity import Identity
from raftbus.gateway.leases import TopicLeaser


@dataclass
class Clients:
    """The SDK clients of one set of credentials."""

    router: Router
    admin: Admin
    reader: Reader
    queues: Queues
    producer: Producer
    leaser: TopicLeaser
    credentials: dict  # the SDK's tls_ca, tls_cert, tls_key, token: consumer instances are built with them
    tables: dict = field(default_factory=dict)  # topic -> Table over the router (built on first use)
    tables_lock: threading.Lock = field(default_factory=threading.Lock)

    def table(self, topic: str) -> Table:
        """The Table of `topic` over this set's router (one idempotent producer per table and partition)."""
        with self.tables_lock:
            found = self.tables.get(topic)
            if found is None:
                found = self.tables[topic] = Table(topic=topic, router=self.router)
            return found

    @classmethod
    def connect(cls, bootstrap: str, credentials: dict) -> "Clients":
        router = Router(bootstrap, **credentials)
        queues = Queues(router=router)
        return cls(router, Admin(router=router), Reader(router=router), queues,
                   Producer(bootstrap, linger_ms=settings.PRODUCE_LINGER_MS, **credentials), TopicLeaser(queues),
                   credentials)

    def close(self) -> None:
        self.producer.close(timeout_s=10)
        self.queues.close()
        with self.tables_lock:
            tables, self.tables = list(self.tables.values()), {}
        for table in tables:
            table.close()
        self.router.close()


@dataclass
class ClientSet:
    token: str
    identity: Identity
    checked_s: float
    clients: Clients | None = None
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)  # held while the clients are built

    def close(self) -> None:
        with self.lock:
            clients, self.clients, self.closed = self.clients, None, True
        if clients is not None:
            clients.close()


class ClientSets:
    """Client sets by token, for tokens the cluster accepted; see the module docstring for the bounds."""

    def __init__(self, check: Callable[[str], Identity], connect: Callable[[str], Clients], *, sets_max: int,
                 per_principal_max: int, recheck_ms: int, clock: Callable[[], float] = time.monotonic):
        self._check = check
        self._connect = connect  # token -> the Clients carrying it
        self.sets_max = sets_max
        self.per_principal_max = per_principal_max
        self.recheck_s = recheck_ms / 1000
        self._clock = clock
        self._sets: OrderedDict[str, ClientSet] = OrderedDict()
        self._lock = threading.Lock()

    def resolve(self, token: str) -> ClientSet:
        """The set of `token` with its clients built; Unauthenticated (and nothing kept) when the cluster refuses
        the token."""
        with self._lock:
            found = self._sets.get(token)
            if found is not None:
                self._sets.move_to_end(token)
                if self._clock() - found.checked_s < self.recheck_s:
                    return self._built(found)
        try:
            identity = self._check(token)
        except Unauthenticated:
            self._drop(token)
            raise
        return self._built(self._keep(token, identity))

    def _keep(self, token: str, identity: Identity) -> ClientSet:
        evicted = []
        with self._lock:
            found = self._sets.get(token)
            if found is not None:
                found.identity, found.checked_s = identity, self._clock()
                return found
            same = [s for s in self._sets.values() if s.identity.principal == identity.principal]
            while len(same) >= self.per_principal_max:
                evicted.append(self._sets.pop(same.pop(0).token))
            while len(self._sets) >= self.sets_max:
                evicted.append(self._sets.popitem(last=False)[1])
            kept = self._sets[token] = ClientSet(token, identity, self._clock())
        if evicted:  # closing flushes their producers: not on this request's time
            threading.Thread(target=lambda: [s.close() for s in evicted], daemon=True,
                             name="raftbus-http-client-set-close").start()
        return kept

    def _built(self, client_set: ClientSet) -> ClientSet:
        with client_set.lock:
            if client_set.closed:
                raise Unavailable("this token's clients were just closed to make room for others: retry")
            if client_set.clients is None:
                client_set.clients = self._connect(client_set.token)
        return client_set

    def _drop(self, token: str) -> None:
        with self._lock:
            dropped = self._sets.pop(token, None)
        if dropped is not None:
            dropped.close()

    def counts(self) -> dict[str, int]:
        """Sets held per principal."""
        with self._lock:
            found: dict[str, int] = {}
            for client_set in self._sets.values():
                found[client_set.identity.principal] = found.get(client_set.identity.principal, 0) + 1
            return found

    def close(self) -> None:
        with self._lock:
            held, self._sets = list(self._sets.values()), OrderedDict()
        for client_set in held:
            client_set.close()
