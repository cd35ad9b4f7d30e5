"""The security tables of the metadata state machine and how its token and ACL commands change them. Pure.

Tables (in the metadata store, written in the same transaction as the applied index):
    tokens  token SHA-256 hex (ascii) -> JSON {"principal", "created_ms"}
    acls    JSON [principal, resource_type, resource_name, operation] -> JSON {"created_ms"}
Planning refuses with a typed error and changes nothing; otherwise it returns the rows to put and delete.
"""
from __future__ import annotations

import json
import re
from types import MappingProxyType
from typing import Mapping, NamedTuple

from raftbus.client import errors

from raftbus.broker.security import commands as security_commands
from raftbus.broker.security.acl import ADMIN, CLUSTER, Acl, validate_acl, validate_principal
from raftbus.broker.security.scram import ITERATIONS_MIN, MECHANISMS, ScramVerifier, key_bytes
from raftbus.broker.security.tokens import token_id

TOKENS, ACLS = "tokens", "acls"
TABLES = (TOKENS, ACLS)
_HASH = re.compile(r"[0-9a-f]{64}")


class TokenRecord(NamedTuple):
    principal: str
    created_ms: int
    # the token's SCRAM verifiers by mechanism (the Kafka port's SASL), never the token; empty for a token created
    # without them
    scram: MappingProxyType = MappingProxyType({})

    def to_json(self) -> bytes:
        out = {"principal": self.principal, "created_ms": self.created_ms}
        if self.scram:
            out["scram"] = {m: v.to_dict() for m, v in self.scram.items()}
        return json.dumps(out, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw) -> "TokenRecord":
        data = json.loads(bytes(raw))
        scram = {m: ScramVerifier.from_dict(v) for m, v in data.get("scram", {}).items()}
        return cls(data["principal"], data["created_ms"], MappingProxyType(scram))


class SecurityTables(NamedTuple):
    """What the metadata group knows about principals: immutable, replaced as a whole on every change."""

    tokens: Mapping[str, TokenRecord] = MappingProxyType({})  # token hash -> record
    acls: Mapping[Acl, int] = MappingProxyType({})  # acl -> created_ms

    def tokens_of(self, principal: str = "") -> list[tuple[str, TokenRecord]]:
        """(token id, record) of every token, or of one principal's, sorted by principal then creation."""
        rows = [(token_id(h), r) for h, r in self.tokens.items() if not principal or r.principal == principal]
        return sorted(rows, key=lambda row: (row[1].principal, row[1].created_ms, row[0]))

    def acls_of(self, principal: str = "") -> list[Acl]:
        return sorted(a for a in self.acls if not principal or a.principal == principal)

    def scram_verifiers(self, principal: str, mechanism: str) -> list[ScramVerifier]:
        """The `mechanism` verifiers of the principal's tokens under its newest token's salt (what SCRAM offers),
        newest first."""
        found = sorted(((r.created_ms, r.scram[mechanism]) for r in self.tokens.values()
                        if r.principal == principal and mechanism in r.scram), key=lambda pair: pair[0])
        if not found:
            return []
        salt = found[-1][1].salt
        return [v for _, v in reversed(found) if v.salt == salt]


class SecurityChange(NamedTuple):
    put_tokens: tuple = ()  # (hash, TokenRecord)
    deleted_tokens: tuple = ()  # hashes
    put_acls: tuple = ()  # (Acl, created_ms)
    deleted_acls: tuple = ()  # Acls


def plan(tables: SecurityTables, kind: str, payload: dict):
    """(result, SecurityChange) of one token or ACL command; a typed error when refused."""
    planner = {
        security_commands.CREATE_TOKEN: _plan_create_token,
        security_commands.REVOKE_TOKENS: _plan_revoke_tokens,
        security_commands.GRANT_ACL: _plan_grant_acl,
        security_commands.REVOKE_ACL: _plan_revoke_acl,
        security_commands.BOOTSTRAP_ADMIN: _plan_bootstrap_admin,
    }[kind]
    return planner(tables, payload)


def _checked_hash(value: str) -> str:
    if not _HASH.fullmatch(value):
        raise errors.InvalidArgument("token_hash must be 64 lowercase hex digits")
    return value


def _checked_scram(raw) -> MappingProxyType:
    """The verifiers a create_token or bootstrap_admin command carries, by mechanism (empty: the token has none)."""
    if raw is None:
        return MappingProxyType({})
    if not isinstance(raw, dict) or not set(raw) <= set(MECHANISMS):
        raise errors.InvalidArgument(f"scram maps mechanisms among {MECHANISMS} to verifiers")
    out = {}
    for mechanism, fields in raw.items():
        try:
            found = ScramVerifier.from_dict(fields)
        except (TypeError, KeyError, ValueError):
            raise errors.InvalidArgument("a SCRAM verifier holds salt, iterations, stored_key and server_key") \
                from None
        size = key_bytes(mechanism)
        if found.iterations < ITERATIONS_MIN or len(found.stored_key) != size or len(found.server_key) != size or \
                not found.salt:
            raise errors.InvalidArgument(f"a {mechanism} verifier has {size}-byte keys, a salt and at least "
                                         f"{ITERATIONS_MIN} iterations")
        out[mechanism] = found
    return MappingProxyType(out)


def _plan_create_token(tables: SecurityTables, p: dict):
    principal, hashed = validate_principal(p["principal"]), _checked_hash(p["token_hash"])
    if hashed in tables.tokens:
        raise errors.InvalidArgument("that token already exists")
    record = TokenRecord(principal, p["now_ms"], _checked_scram(p.get("scram")))
    return token_id(hashed), SecurityChange(put_tokens=((hashed, record),))


def _plan_revoke_tokens(tables: SecurityTables, p: dict):
    principal, wanted = p["principal"], p["token_id"]
    gone = tuple(h for h, r in tables.tokens.items()
                 if r.principal == principal and (not wanted or token_id(h) == wanted))
    return len(gone), SecurityChange(deleted_tokens=gone)


def _plan_grant_acl(tables: SecurityTables, p: dict):
    acl = validate_acl(security_commands.acl_of(p))
    if acl in tables.acls:
        return False, SecurityChange()
    return True, SecurityChange(put_acls=((acl, p["now_ms"]),))


def _plan_revoke_acl(tables: SecurityTables, p: dict):
    acl = security_commands.acl_of(p)
    if acl not in tables.acls:
        return 0, SecurityChange()
    return 1, SecurityChange(deleted_acls=(acl,))


def _plan_bootstrap_admin(tables: SecurityTables, p: dict):
    if tables.tokens or tables.acls:
        return False, SecurityChange()
    principal, hashed = validate_principal(p["principal"]), _checked_hash(p["token_hash"])
    record = TokenRecord(principal, p["now_ms"], _checked_scram(p.get("scram")))
    return True, SecurityChange(put_tokens=((hashed, record),),
                                put_acls=((Acl(principal, CLUSTER, "", ADMIN), p["now_ms"]),))


# ---------------------------------------------------------------------- store and publication
def _acl_key(acl: Acl) -> bytes:
    return json.dumps(list(acl), separators=(",", ":")).encode()


def write(txn, change: SecurityChange) -> None:
    for hashed, record in change.put_tokens:
        txn.put(TOKENS, hashed.encode(), record.to_json())
    for hashed in change.deleted_tokens:
        txn.delete(TOKENS, hashed.encode())
    for acl, created_ms in change.put_acls:
        txn.put(ACLS, _acl_key(acl), json.dumps({"created_ms": created_ms}).encode())
    for acl in change.deleted_acls:
        txn.delete(ACLS, _acl_key(acl))


def after(tables: SecurityTables, change: SecurityChange) -> SecurityTables:
    """The tables once `change` is applied (new immutable mappings; the old ones stay valid for readers)."""
    tokens = {h: r for h, r in tables.tokens.items() if h not in set(change.deleted_tokens)}
    tokens.update(change.put_tokens)
    acls = {a: c for a, c in tables.acls.items() if a not in set(change.deleted_acls)}
    acls.update(change.put_acls)
    return SecurityTables(MappingProxyType(tokens), MappingProxyType(acls))


def load(txn) -> SecurityTables:
    tokens = {bytes(k).decode(): TokenRecord.from_json(v) for k, v in txn.items(TOKENS)}
    acls = {Acl(*json.loads(bytes(k))): json.loads(bytes(v))["created_ms"] for k, v in txn.items(ACLS)}
    return SecurityTables(MappingProxyType(tokens), MappingProxyType(acls))


def changes_anything(change: SecurityChange) -> bool:
    return any(change)
