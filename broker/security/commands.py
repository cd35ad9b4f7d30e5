"""Token and ACL commands of the metadata group: JSON objects like every metadata command (b"J" + JSON with
"type"). A token travels only as its hash: the controller generates the token and proposes its SHA-256.

    create_token     principal, token_hash, (scram) a new token of the principal, with its SCRAM verifiers
    revoke_tokens    principal, token_id            one token of the principal ("" = all of them)
    grant_acl        principal, resource_type, resource_name, operation
    revoke_acl       the same four fields
    bootstrap_admin  principal, token_hash          the first admin: a token and admin on the cluster, applied only
                                                    while the cluster has no token and no ACL yet
"""
from __future__ import annotations

import json

from raftbus.broker import commands
from raftbus.broker.security.acl import Acl

CREATE_TOKEN = "create_token"
REVOKE_TOKENS = "revoke_tokens"
GRANT_ACL = "grant_acl"
REVOKE_ACL = "revoke_acl"
BOOTSTRAP_ADMIN = "bootstrap_admin"
METADATA_KINDS = frozenset({CREATE_TOKEN, REVOKE_TOKENS, GRANT_ACL, REVOKE_ACL, BOOTSTRAP_ADMIN})

_ACL_FIELDS = {"principal": str, "resource_type": str, "resource_name": str, "operation": str, "now_ms": int}
METADATA_FIELDS: dict[str, dict[str, type]] = {
    CREATE_TOKEN: {"principal": str, "token_hash": str, "now_ms": int},
    REVOKE_TOKENS: {"principal": str, "token_id": str, "now_ms": int},
    GRANT_ACL: _ACL_FIELDS,
    REVOKE_ACL: _ACL_FIELDS,
    BOOTSTRAP_ADMIN: {"principal": str, "token_hash": str, "now_ms": int},
}


def _json(command_type: str, **fields) -> bytes:
    return b"J" + json.dumps({"type": command_type, **fields}, separators=(",", ":"), sort_keys=True).encode()


def encode_create_token(*, principal: str, token_hash: str, now_ms: int, scram: dict | None = None) -> bytes:
    """`scram`: the token's SCRAM verifiers by mechanism (broker/security/scram.py), never the token."""
    extra = {"scram": scram} if scram is not None else {}
    return _json(CREATE_TOKEN, principal=principal, token_hash=token_hash, now_ms=now_ms, **extra)


def encode_revoke_tokens(*, principal: str, token_id: str, now_ms: int) -> bytes:
    return _json(REVOKE_TOKENS, principal=principal, token_id=token_id, now_ms=now_ms)


def encode_grant_acl(acl: Acl, *, now_ms: int) -> bytes:
    return _json(GRANT_ACL, **acl._asdict(), now_ms=now_ms)


def encode_revoke_acl(acl: Acl, *, now_ms: int) -> bytes:
    return _json(REVOKE_ACL, **acl._asdict(), now_ms=now_ms)


def encode_bootstrap_admin(*, principal: str, token_hash: str, now_ms: int, scram: dict | None = None) -> bytes:
    extra = {"scram": scram} if scram is not None else {}
    return _json(BOOTSTRAP_ADMIN, principal=principal, token_hash=token_hash, now_ms=now_ms, **extra)


def acl_of(payload: dict) -> Acl:
    return Acl(payload["principal"], payload["resource_type"], payload["resource_name"], payload["operation"])


commands.register(METADATA_FIELDS)
