"""Who a request acts as, and the SDK clients it gets for that.

The gateway keeps no state of its own about topics, offsets or messages: every request turns into SDK calls on the
clients of its caller (client_sets.py). Consumer instances (consumer-group members held for HTTP clients) are the
only per-client state; see instances.py.

Callers:
- **A bearer token** (`Authorization: Bearer <token>`): the cluster is asked who it is (identity.py) before
  anything is built; a refused token is 401 UNAUTHENTICATED and leaves nothing behind; an accepted one gets the
  client set of its token, so the brokers check every call as its principal.
- **No token**: 401 UNAUTHENTICATED, unless the gateway was started with `--anonymous PRINCIPAL`; then the request
  acts as that principal, with the token in `--anonymous-token-file` (which must be a token of PRINCIPAL). On a
  cluster that does not check tokens no token is needed, and anonymous callers act with the gateway's TLS only.
  The gateway's own environment token (RAFTBUS_TOKEN_FILE) is never used for a request.
- **A cluster that does not check tokens** (`auth_enabled` off on the brokers, as WhoAmI says): a token is forwarded
  and the request served as the cluster serves everyone, with every right; the gateway logs one warning the first
  time, and such answers carry `X-Raftbus-Token-Checked: false`.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from raftbus.client.credentials import read_token_file
from raftbus.client.errors import InvalidArgument, Unauthenticated

from raftbus.gateway.client_sets import Clients, ClientSets
from raftbus.gateway.identity import Identity, TokenChecker, check_token_syntax, gateway_tls
from raftbus.gateway.instances import ConsumerInstances
from raftbus.gateway.options import GatewayOptions

log = logging.getLogger("raftbus.gateway")

UNCHECKED_WARNING = ("the cluster at {bootstrap} does not check bearer tokens (auth_enabled is off on its brokers): "
                     "this gateway forwards tokens to it unchecked, so any token, right or wrong, acts with every "
                     "right; turn auth on (docs/security.md)")


@dataclass(frozen=True)
class Caller:
    """Whom a request acts as: its principal, its clients, and whether the cluster checked its token."""

    principal: str
    clients: Clients
    token_checked: bool = True


class Gateway:
    """The callers of one gateway process: per-token client sets, the anonymous caller, the consumer instances."""

    def __init__(self, bootstrap: str, options: GatewayOptions = GatewayOptions(), *,
                 check: Callable[[str | None], Identity] | None = None,
                 connect: Callable[[dict], Clients] | None = None, clock: Callable[[], float] = time.monotonic):
        self.bootstrap = bootstrap
        self.options = options
        self.tls = gateway_tls()
        self._checker = TokenChecker(bootstrap, self.tls) if check is None else None
        self._check = check or self._checker
        self._connect = connect or (lambda credentials: Clients.connect(bootstrap, credentials))
        self._clock = clock
        self.client_sets = ClientSets(self._check, lambda token: self._connect({**self.tls, "token": token}),
                                      sets_max=options.token_client_sets_max,
                                      per_principal_max=options.token_client_sets_per_principal_max,
                                      recheck_ms=options.token_recheck_ms, clock=clock)
        self.consumers = ConsumerInstances(bootstrap, instances_max=options.consumer_instances_max,
                                           instances_per_principal_max=options.consumer_instances_per_principal_max)
        self._anonymous_token = (read_token_file(options.anonymous_token_file)
                                 if options.anonymous_token_file else None)
        self._open: Clients | None = None  # anonymous callers' clients when the cluster checks no tokens
        self._open_checked_s: float | None = None
        self._lock = threading.Lock()
        self._warned_unchecked = False

    def caller(self, token: str | None) -> Caller:
        """Whom a request bearing `token` (None: no Authorization header) acts as. Blocks on the cluster's answer."""
        if token is not None:
            check_token_syntax(token)
            client_set = self.client_sets.resolve(token)
            checked = client_set.identity.auth_enabled
            if not checked:
                self._warn_unchecked()
            return Caller(client_set.identity.principal, client_set.clients, token_checked=checked)
        if not self.options.anonymous:
            raise Unauthenticated("this gateway serves no anonymous callers: send Authorization: Bearer <token> "
                                  "(or start it with --anonymous PRINCIPAL)")
        try:
            if self._anonymous_token is not None:
                client_set = self.client_sets.resolve(self._anonymous_token)
                self._check_anonymous(client_set.identity)
                return Caller(self.options.anonymous, client_set.clients)
            return Caller(self.options.anonymous, self._open_clients())
        except InvalidArgument as exc:  # the cluster turned auth on, or was out of reach when the gateway started
            log.error("anonymous callers refused: %s", exc.message)
            raise Unauthenticated(f"this gateway cannot serve anonymous callers: {exc.message}") from None

    def check_anonymous(self) -> None:
        """At start: the anonymous principal's token names that principal (InvalidArgument otherwise)."""
        if not self.options.anonymous:
            return
        if self._anonymous_token is not None:
            self._check_anonymous(self._check(self._anonymous_token))
        else:
            self._check_anonymous(self._identity_without_token())

    def _identity_without_token(self) -> Identity:
        """Who a caller without a token is to the cluster; refused means the cluster checks tokens."""
        try:
            return self._check(None)
        except Unauthenticated:
            return Identity("", True)

    def _check_anonymous(self, identity: Identity) -> None:
        name = self.options.anonymous
        if not identity.auth_enabled:
            return  # the cluster names no principals: the name labels anonymous callers only
        if self._anonymous_token is None:
            raise InvalidArgument(f"--anonymous {name} on a cluster that checks tokens needs "
                                  "--anonymous-token-file, a token of that principal")
        if identity.principal != name:
            raise InvalidArgument(f"--anonymous-token-file holds a token of {identity.principal!r}, not of "
                                  f"{name!r}: anonymous callers would act as {identity.principal!r}")

    def _open_clients(self) -> Clients:
        """The clients of anonymous callers on a cluster that checks no tokens (asked again after recheck_ms)."""
        with self._lock:
            checked_s = self._open_checked_s
        if checked_s is None or self._clock() - checked_s >= self.options.token_recheck_ms / 1000:
            self._check_anonymous(self._identity_without_token())
            with self._lock:
                self._open_checked_s = self._clock()
        with self._lock:
            if self._open is None:
                self._open = self._connect(dict(self.tls))
            return self._open

    def _warn_unchecked(self) -> None:
        with self._lock:
            if self._warned_unchecked:
                return
            self._warned_unchecked = True
        log.warning(UNCHECKED_WARNING.format(bootstrap=self.bootstrap))

    def close(self) -> None:
        self.consumers.close()
        self.client_sets.close()
        with self._lock:
            found, self._open = self._open, None
        if found is not None:
            found.close()
        if self._checker is not None:
            self._checker.close()


# Declared in the OpenAPI document; the token itself is read and checked by the request guard (guard.py) before
# the body is read, and the caller it names is in the request's state.
bearer = HTTPBearer(auto_error=False, description="a raftbus token: the request acts as its principal")


def caller(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Caller:
    """FastAPI dependency: whom this request acts as (resolved by the guard)."""
    return request.state.caller


def clients(found: Caller = Depends(caller)) -> Clients:
    """FastAPI dependency: the SDK clients of this request's caller."""
    return found.clients
