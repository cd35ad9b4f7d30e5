"""Who a caller is and what it may do, from the metadata this broker has applied.

An AccessPolicy is built from one immutable SecurityTables value, so it is consistent and needs no lock; the
interceptor builds a new one when the metadata state machine publishes new tables (a token revoked or an ACL
granted takes effect on a broker as soon as that broker applies the command). Decisions are memoized per policy:
a principal × resource × operation is matched against the ACLs once.
"""
from __future__ import annotations

import hmac

from raftbus.broker.security.acl import Acl, allows
from raftbus.broker.security.state import SecurityTables
from raftbus.broker.security.tokens import INTERNAL_PRINCIPAL, is_reserved, token_hash

DECISIONS_CACHED_MAX = 100_000


class AccessPolicy:
    def __init__(self, tables: SecurityTables, *, internal_tokens: tuple[str, ...] = ()):
        self.tables = tables
        self._internal_tokens = tuple(t.encode() for t in internal_tokens)
        self._acls: dict[str, list[Acl]] = {}
        for acl in tables.acls:
            self._acls.setdefault(acl.principal, []).append(acl)
        self._decisions: dict[tuple[str, str, str, str], bool] = {}

    def principal_of_token(self, token: str) -> str | None:
        """The principal holding `token`, or None for an unknown or revoked one. Only the internal token names a
        reserved principal: a stored token of one (written before names were checked) names nobody."""
        presented = token.encode()
        if any(hmac.compare_digest(presented, internal) for internal in self._internal_tokens):
            return INTERNAL_PRINCIPAL
        record = self.tables.tokens.get(token_hash(token))
        return record.principal if record is not None and not is_reserved(record.principal) else None

    def allows(self, principal: str, resource_type: str, name: str, operation: str) -> bool:
        if principal == INTERNAL_PRINCIPAL:
            return True
        key = (principal, resource_type, name, operation)
        decision = self._decisions.get(key)
        if decision is None:
            decision = allows(self._acls.get(principal, ()), resource_type, name, operation)
            if len(self._decisions) >= DECISIONS_CACHED_MAX:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision
