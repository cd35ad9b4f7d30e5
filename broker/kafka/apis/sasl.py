"""SaslHandshake (17) and SaslAuthenticate (36): who the connection is, from raftbus's tokens.

- PLAIN: the user is the token's principal (`raftbus tokens create NAME` makes a token of principal NAME), the
  password is the token. Refused on a plaintext connection from anywhere but loopback (the token would cross the
  network in clear): the handshake does not offer it there.
- SCRAM-SHA-256 and SCRAM-SHA-512: the user is the token's principal and the token is the password, checked
  against the SCRAM verifiers the controller stored with it (broker/security/scram.py); the token never crosses
  the connection. A token without verifiers (one the bootstrap admin's file seeded before them) authenticates
  with PLAIN only.

A failed authentication is answered SASL_AUTHENTICATION_FAILED and the connection closed. A principal named by a
client certificate (mutual TLS) is replaced by the one SASL names, as a bearer token takes precedence over a
certificate on the client port. SaslHandshake v0 (raw SASL frames after it) is not served.
"""
from __future__ import annotations

import logging

from raftbus.broker.kafka import codes
from raftbus.broker.security.scram import MECHANISMS as SCRAM_MECHANISMS, ScramError, ScramExchange

log = logging.getLogger(__name__)
PLAIN = "PLAIN"
PLAIN_BYTES_MAX = 4096
SESSION_LIFETIME_NONE = 0  # no re-authentication is asked for


def mechanisms(session) -> list[str]:
    """What this connection may use: PLAIN only over TLS or from loopback."""
    return [PLAIN, *SCRAM_MECHANISMS] if session.tls or session.loopback else list(SCRAM_MECHANISMS)


def handshake_handler(services):
    async def sasl_handshake(request) -> dict:
        session, offered = request.session, mechanisms(request.session)
        if request.body.mechanism not in offered:
            return {"error_code": codes.UNSUPPORTED_SASL_MECHANISM, "mechanisms": offered}
        session.mechanism, session.exchange = request.body.mechanism, None
        return {"error_code": codes.NONE, "mechanisms": offered}

    return sasl_handshake


def authenticate_handler(services):
    def failed(session, message: str) -> dict:
        session.closing = True
        log.info("kafka authentication failed", extra={"peer": session.peer, "reason": message})
        return {"error_code": codes.SASL_AUTHENTICATION_FAILED, "error_message": message, "auth_bytes": b""}

    def plain(session, auth: bytes) -> dict:
        parts = auth.split(b"\x00") if len(auth) <= PLAIN_BYTES_MAX else []
        if len(parts) != 3:
            return failed(session, "PLAIN expects authzid NUL user NUL password")
        try:
            authzid, user, token = (p.decode() for p in parts)
        except UnicodeDecodeError:
            return failed(session, "PLAIN credentials are not UTF-8")
        if authzid and authzid != user:
            return failed(session, "PLAIN may not act for another user")
        if not user or services.token_policy().principal_of_token(token) != user:
            return failed(session, f"authentication failed for user {user!r}: an unknown or revoked token, or "
                                   "a token of another principal")
        return authenticated(session, user, b"")

    def authenticated(session, principal: str, auth_bytes: bytes) -> dict:
        session.principal, session.mechanism, session.exchange = principal, None, None
        log.info("kafka client authenticated", extra={"peer": session.peer, "principal": principal})
        return {"error_code": codes.NONE, "auth_bytes": auth_bytes, "session_lifetime": SESSION_LIFETIME_NONE}

    def scram(session, auth: bytes) -> dict:
        try:
            if session.exchange is None:
                tables, mechanism = services.token_policy().tables, session.mechanism
                session.exchange = ScramExchange(mechanism, lambda user: tables.scram_verifiers(user, mechanism))
                return {"error_code": codes.NONE, "auth_bytes": session.exchange.first(auth),
                        "session_lifetime": SESSION_LIFETIME_NONE}
            principal, server_final = session.exchange.final(auth)
        except ScramError as exc:
            return failed(session, str(exc))
        return authenticated(session, principal, server_final)

    async def sasl_authenticate(request) -> dict:
        session, auth = request.session, bytes(request.body.auth_bytes)
        if session.mechanism == PLAIN:
            return plain(session, auth)
        if session.mechanism in SCRAM_MECHANISMS:
            return scram(session, auth)
        session.closing = True
        return {"error_code": codes.ILLEGAL_SASL_STATE, "error_message": "SaslHandshake first", "auth_bytes": b""}

    return sasl_authenticate
