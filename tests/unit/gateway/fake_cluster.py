"""Stand-ins for the gateway's unit tests: a token table answering WhoAmI, and SDK clients that record what a
request sent (the produce path and topic listing), so the gateway's app runs in-process without brokers."""
from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

from raftbus.client import errors
from raftbus.gateway.app import create_app
from raftbus.gateway.gateway import Gateway
from raftbus.gateway.identity import Identity
from raftbus.gateway.options import GatewayOptions

TOKENS = {"good": "alice", "other": "bob"}
HOSTS = ("127.0.0.1", "localhost", "::1")


class TokenTable:
    def __init__(self, tokens: dict[str, str] | None = None, auth_enabled: bool = True):
        self.tokens = dict(TOKENS if tokens is None else tokens)
        self.auth_enabled = auth_enabled
        self.checks: list[str | None] = []

    def __call__(self, token: str | None) -> Identity:
        self.checks.append(token)
        if not self.auth_enabled:
            return Identity("", False)
        if token is None or token not in self.tokens:
            raise errors.Unauthenticated("the bearer token is unknown or revoked")
        return Identity(self.tokens[token], True)


class RecordingClients:
    """SDK clients that accept every record of a stream topic `t` and remember them."""

    built: list["RecordingClients"] = []
    sent_by_all: list[tuple] = []  # every record any of them sent, in order

    def __init__(self, credentials: dict):
        self.credentials = credentials
        self.sent: list[tuple] = []
        self.router = SimpleNamespace(topic_kind=lambda topic: "stream")
        self.producer = SimpleNamespace(send=self._send)
        self.admin = SimpleNamespace(list_topics=lambda: [])
        RecordingClients.built.append(self)

    def _send(self, topic, value, *, key=None, headers=None, partition=None) -> Future:
        self.sent.append((topic, value, key, list(headers or ()), partition))
        RecordingClients.sent_by_all.append(self.sent[-1])
        future: Future = Future()
        future.set_result(SimpleNamespace(partition=partition or 0, offset=len(self.sent) - 1))
        return future

    def close(self) -> None:
        pass


def make_app(table: TokenTable | None = None, hosts: tuple[str, ...] = HOSTS, **options):
    """(app, gateway) over stand-ins; close the gateway after use."""
    gateway = Gateway("127.0.0.1:1", GatewayOptions(**options), check=table or TokenTable(),
                      connect=RecordingClients)
    return create_app(gateway, hosts), gateway
