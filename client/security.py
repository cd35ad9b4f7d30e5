"""Principals' tokens and ACLs from the SDK: Admin's security calls (proto/security.proto, docs/security.md).

Every call needs admin on the cluster, except `whoami`. A created token is returned once and never stored in
clear by the cluster: keep it (e.g. in a file read by `token=` or RAFTBUS_TOKEN_FILE).
"""
from __future__ import annotations

from raftbus.client.errors import InvalidArgument
from raftbus.client.wire import security_pb2 as spb
from raftbus.client.wire import security_pb2_grpc as spb_grpc

OPERATIONS = ("produce", "consume", "admin")


def acl_message(principal: str, operation: str, *, topic: str | None = None, prefix: str | None = None,
                group: str | None = None, cluster: bool = False) -> spb.Acl:
    """The ACL naming exactly one resource: a topic, a topic prefix, a consumer group or the cluster."""
    named = [(kind, name) for kind, name in (("topic", topic), ("prefix", prefix), ("group", group)) if name]
    if cluster:
        named.append(("cluster", ""))
    if len(named) != 1:
        raise InvalidArgument("an ACL names exactly one resource: topic, prefix, group or cluster")
    if operation not in OPERATIONS:
        raise InvalidArgument(f"operation must be one of {OPERATIONS}, not {operation!r}")
    kind, name = named[0]
    return spb.Acl(principal=principal, resource_type=kind, resource_name=name, operation=operation)


def acl_dict(acl: spb.Acl) -> dict:
    return {"principal": acl.principal, "resource_type": acl.resource_type, "resource_name": acl.resource_name,
            "operation": acl.operation}


class SecurityCalls:
    """Mixed into Admin: needs `self.router` and `self.request_timeout_s`."""

    def _security(self, conn) -> spb_grpc.SecurityStub:
        return spb_grpc.SecurityStub(conn.channel)

    def create_token(self, principal: str) -> dict:
        """{"principal", "token", "token_id"} of a new bearer token of `principal`."""
        request = spb.CreateTokenRequest(principal=principal)
        response = self.router.call_controller(
            lambda conn: self._security(conn).CreateToken(request, timeout=self.request_timeout_s))
        return {"principal": response.principal, "token": response.token, "token_id": response.token_id}

    def list_tokens(self, principal: str = "") -> list[dict]:
        """{"principal", "token_id", "created_ms"} of every token (of one principal when given); never the token."""
        request = spb.ListTokensRequest(principal=principal)
        response = self.router.call_any(
            lambda conn: self._security(conn).ListTokens(request, timeout=self.request_timeout_s))
        return [{"principal": t.principal, "token_id": t.token_id, "created_ms": t.created_ms}
                for t in response.tokens]

    def revoke_tokens(self, principal: str, token_id: str = "") -> int:
        """Revoke one token of `principal` (by id) or all of them; returns how many were revoked."""
        request = spb.RevokeTokensRequest(principal=principal, token_id=token_id)
        return self.router.call_controller(
            lambda conn: self._security(conn).RevokeTokens(request, timeout=self.request_timeout_s)).revoked

    def grant_acl(self, principal: str, operation: str, **resource) -> None:
        """Allow `operation` on one resource: topic=, prefix=, group= or cluster=True."""
        request = spb.GrantAclRequest(acl=acl_message(principal, operation, **resource))
        self.router.call_controller(
            lambda conn: self._security(conn).GrantAcl(request, timeout=self.request_timeout_s))

    def revoke_acl(self, principal: str, operation: str, **resource) -> int:
        request = spb.RevokeAclRequest(acl=acl_message(principal, operation, **resource))
        return self.router.call_controller(
            lambda conn: self._security(conn).RevokeAcl(request, timeout=self.request_timeout_s)).revoked

    def list_acls(self, principal: str = "") -> list[dict]:
        request = spb.ListAclsRequest(principal=principal)
        response = self.router.call_any(
            lambda conn: self._security(conn).ListAcls(request, timeout=self.request_timeout_s))
        return [acl_dict(a) for a in response.acls]

    def whoami(self) -> dict:
        """{"principal", "auth_enabled"}: who the cluster takes this client for."""
        response = self.router.call_any(
            lambda conn: self._security(conn).WhoAmI(spb.WhoAmIRequest(), timeout=self.request_timeout_s))
        return {"principal": response.principal, "auth_enabled": response.auth_enabled}
