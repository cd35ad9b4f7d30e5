"""The Security gRPC service: tokens and ACLs (proto/security.proto). Translates proto ⇄ SecurityService."""
from __future__ import annotations

from raftbus.client.wire import security_pb2 as spb
from raftbus.client.wire import security_pb2_grpc as spb_grpc

from raftbus.broker.grpc_server import unary
from raftbus.broker.security.acl import Acl
from raftbus.broker.security.interceptor import certificate_subject
from raftbus.broker.security.tokens import bearer_token


def acl_proto(acl: Acl) -> spb.Acl:
    return spb.Acl(principal=acl.principal, resource_type=acl.resource_type, resource_name=acl.resource_name,
                   operation=acl.operation)


def acl_of(message: spb.Acl) -> Acl:
    return Acl(message.principal, message.resource_type, message.resource_name, message.operation)


class SecurityServicer(spb_grpc.SecurityServicer):
    def __init__(self, security_service, *, authorizer=None):
        self.service = security_service
        self.authorizer = authorizer  # None while auth is off

    @unary
    def CreateToken(self, request, context):
        token, token_id = self.service.create_token(request.principal)
        return spb.CreateTokenResponse(principal=request.principal, token=token, token_id=token_id)

    @unary
    def ListTokens(self, request, context):
        return spb.ListTokensResponse(tokens=[
            spb.TokenInfo(principal=record.principal, token_id=token_id, created_ms=record.created_ms)
            for token_id, record in self.service.list_tokens(request.principal)])

    @unary
    def RevokeTokens(self, request, context):
        return spb.RevokeTokensResponse(revoked=self.service.revoke_tokens(request.principal, request.token_id))

    @unary
    def GrantAcl(self, request, context):
        self.service.grant_acl(acl_of(request.acl))
        return spb.GrantAclResponse()

    @unary
    def RevokeAcl(self, request, context):
        return spb.RevokeAclResponse(revoked=self.service.revoke_acl(acl_of(request.acl)))

    @unary
    def ListAcls(self, request, context):
        return spb.ListAclsResponse(acls=[acl_proto(a) for a in self.service.list_acls(request.principal)])

    @unary
    def WhoAmI(self, request, context):
        if self.authorizer is None:
            return spb.WhoAmIResponse(principal="", auth_enabled=False)
        principal = self.authorizer.authenticate("/raftbus.v1.Security/WhoAmI",
                                                 bearer_token(context.invocation_metadata()),
                                                 certificate_subject(context))
        return spb.WhoAmIResponse(principal=principal, auth_enabled=True)


def security_servicers(security_service, authorizer=None) -> list:
    """(add_to_server, servicer) pairs of the Security service."""
    return [(spb_grpc.add_SecurityServicer_to_server, SecurityServicer(security_service, authorizer=authorizer))]
