"""Principals' tokens and ACLs: the rules, independent of gRPC. Writes on the controller, reads on any broker."""
from __future__ import annotations

import threading

from raftbus.client import errors

from raftbus.broker.context import BrokerContext, wait_result
from raftbus.broker.security import commands as security_commands
from raftbus.broker.security import scram
from raftbus.broker.security.acl import Acl, validate_acl, validate_principal
from raftbus.broker.security.state import TokenRecord
from raftbus.broker.security.tokens import is_reserved, new_token, token_hash


def not_reserved(principal: str) -> str:
    """The principal if valid and outside the brokers' own namespace; InvalidArgument otherwise. Checked here,
    before a command is proposed, so the state machine decides as every release before it did."""
    validate_principal(principal)
    if is_reserved(principal):
        raise errors.InvalidArgument(f"principal {principal!r} is reserved (raftbus:...): only brokers act as one, "
                                     "with a key of the cluster secret")
    return principal


class SecurityService:
    def __init__(self, context: BrokerContext, scram_iterations: int = scram.ITERATIONS_MIN):
        self.context = context
        self.timeout_s = context.commit_timeout_s
        self.scram_iterations = scram_iterations
        self._creating = threading.Lock()  # a principal's tokens share one SCRAM salt: one creation at a time

    def _commit(self, command: bytes):
        self.context.require_controller()
        return wait_result(self.context.metadata_group.submit(command), self.timeout_s)

    def _now_ms(self) -> int:
        return self.context.clock.now_ms()

    # ------------------------------------------------------------------ tokens
    def create_token(self, principal: str) -> tuple[str, str]:
        """(token, token id) of a new token of `principal`; the token itself is never stored or logged, only its
        SHA-256 and its SCRAM verifiers (SHA-256 and SHA-512, salted and iterated, under the principal's salt)."""
        not_reserved(principal)
        token = new_token()
        with self._creating:
            return token, self._commit(security_commands.encode_create_token(
                principal=principal, token_hash=token_hash(token), now_ms=self._now_ms(),
                scram=self._verifier(principal, token)))

    def _verifier(self, principal: str, token: str) -> dict:
        known = self.context.metadata_sm.security().scram_verifiers(principal, scram.SHA_512)
        salt = known[0].salt if known else scram.new_salt()
        return scram.verifiers(token, salt, self.scram_iterations)

    def revoke_tokens(self, principal: str, token_id: str = "") -> int:
        """How many tokens of `principal` were revoked (all of them, or the one with that id)."""
        validate_principal(principal)
        return self._commit(security_commands.encode_revoke_tokens(principal=principal, token_id=token_id, now_ms=self._now_ms()))

    def list_tokens(self, principal: str = "") -> list[tuple[str, TokenRecord]]:
        return self.context.metadata_sm.security().tokens_of(principal)

    def bootstrap_admin(self, principal: str, token: str) -> bool:
        """Make `principal` (holding `token`) the first admin while the cluster has no token and no ACL yet."""
        if self.context.metadata_sm.security().tokens:
            return False
        return self._commit(security_commands.encode_bootstrap_admin(
            principal=not_reserved(principal), token_hash=token_hash(token), now_ms=self._now_ms(),
            scram=scram.verifiers(token, scram.new_salt(), self.scram_iterations)))

    # ------------------------------------------------------------------ ACLs
    def grant_acl(self, acl: Acl) -> bool:
        not_reserved(acl.principal)
        return self._commit(security_commands.encode_grant_acl(validate_acl(acl), now_ms=self._now_ms()))

    def revoke_acl(self, acl: Acl) -> int:
        return self._commit(security_commands.encode_revoke_acl(acl, now_ms=self._now_ms()))

    def list_acls(self, principal: str = "") -> list[Acl]:
        return self.context.metadata_sm.security().acls_of(principal)


def bootstrap_token(path: str) -> str:
    """The token in the bootstrap token file (one line); InvalidArgument when missing or empty."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as exc:
        raise errors.InvalidArgument(f"auth_bootstrap_token_file {path}: {exc.strerror}") from None
    if not token:
        raise errors.InvalidArgument(f"auth_bootstrap_token_file {path} is empty")
    return token

