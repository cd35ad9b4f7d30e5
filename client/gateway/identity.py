"""Who a bearer token is, asked of the cluster before the gateway builds anything for it.

The gateway holds no token of its own for this: it calls Security/WhoAmI with the caller's token over one shared
Router that carries only the gateway's TLS trust (RAFTBUS_TLS_CA, _CERT, _KEY). The answer names the token's
principal and whether the cluster checks tokens at all (`auth_enabled`); an unknown or revoked token is
UNAUTHENTICATED. A token that is not one word of printable ASCII, or longer than BEARER_TOKEN_BYTES_MAX, is
refused without a call (`check_token_syntax`, run by the gateway first).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from raftbus.client.credentials import TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV
from raftbus.client.errors import Unauthenticated
from raftbus.client.router import Router
from raftbus.client.wire import security_pb2 as spb
from raftbus.client.wire import security_pb2_grpc as spb_grpc

from raftbus.gateway import settings


@dataclass(frozen=True)
class Identity:
    principal: str
    auth_enabled: bool


def gateway_tls(environ=os.environ) -> dict:
    """The SDK credentials of the gateway's own connections: its TLS trust and client certificate from the
    environment, and never a token (RAFTBUS_TOKEN_FILE is not read: no request acts with the gateway's identity).
    `tls_ca=False` says "plaintext" so the SDK does not fall back to the environment's token."""
    found = {"tls_ca": environ.get(TLS_CA_ENV), "tls_cert": environ.get(TLS_CERT_ENV),
             "tls_key": environ.get(TLS_KEY_ENV)}
    given = {name: value for name, value in found.items() if value}
    return given or {"tls_ca": False}


def check_token_syntax(token: str) -> None:
    """Unauthenticated unless `token` could be a token: one line of printable ASCII, not too long."""
    if not token:
        raise Unauthenticated("the bearer token is empty")
    if len(token) > settings.BEARER_TOKEN_BYTES_MAX:
        raise Unauthenticated(f"the bearer token is longer than bearer_token_bytes_max="
                              f"{settings.BEARER_TOKEN_BYTES_MAX}")
    if not token.isascii() or not token.isprintable() or " " in token:
        raise Unauthenticated("the bearer token is not one word of printable ASCII")


class TokenChecker:
    """Asks the cluster who a token is (Security/WhoAmI through any broker, retrying unreachable ones)."""

    def __init__(self, bootstrap: str, tls: dict | None = None):
        self.router = Router(bootstrap, **(tls if tls is not None else gateway_tls()))

    def __call__(self, token: str | None) -> Identity:
        """The identity of `token` (None: of a caller without one, as the gateway's channels present it)."""
        metadata = ()
        if token is not None:
            metadata = (("authorization", f"Bearer {token}"),)
        timeout_s = self.router.request_timeout_s
        answer = self.router.call_any(lambda conn: spb_grpc.SecurityStub(conn.channel).WhoAmI(
            spb.WhoAmIRequest(), metadata=metadata, timeout=timeout_s))
        return Identity(answer.principal, answer.auth_enabled)

    def close(self) -> None:
        self.router.close()
