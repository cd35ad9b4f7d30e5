"""The gRPC server interceptor that authenticates and authorizes every call from the broker's applied metadata.

Authentication: a bearer token (`authorization: Bearer <token>` call metadata) names its principal through the
token table; without a token, a verified client certificate (mutual TLS) names a principal through the explicit
`tls_principal_rules` over its subject (principals.py; none by default, never a reserved one). Neither →
UNAUTHENTICATED. Authentication reads only the call's metadata and the TLS session, so it runs before the request
message is read: a call with a bearer token is authenticated when it arrives (`intercept_service`), and refused
then with a handler that never asks for its message; a call without one (a client certificate, or nothing) is
served as a request stream that authenticates before it reads its one message. An unauthenticated caller's
message is never received in full nor parsed, whatever its size (below `grpc_message_bytes_max`). Authorization:
every check of the method's row in methods.py must be allowed by the principal's ACLs → else PERMISSION_DENIED
naming the operation, the resource and the call.
Unary requests are checked before the servicer runs; each request of a request stream as it is read.
"""
from __future__ import annotations

from collections.abc import Callable

import grpc

from raftbus.client import errors

from raftbus.broker.security.acl import describe
from raftbus.broker.security.methods import PUBLIC, METHOD_CHECKS, operation_name
from raftbus.broker.security.policy import AccessPolicy
from raftbus.broker.security.principals import Rule, certificate_principal
from raftbus.broker.security.state import SecurityTables
from raftbus.broker.security.tokens import bearer_token

_CERT_SUBJECT_KEY = "x509_subject"


def _abort(context: grpc.ServicerContext, error: errors.RaftbusError):
    context.set_trailing_metadata(errors.trailing_metadata(error))
    context.abort(errors.status_for(error), error.message)


def certificate_subject(context: grpc.ServicerContext) -> str | None:
    """The subject (RFC 2253) of the caller's verified client certificate, if it presented one."""
    subjects = context.auth_context().get(_CERT_SUBJECT_KEY) or ()
    return subjects[0].decode("utf-8", errors="replace") if subjects else None


class Authorizer:
    """Decides for one call: who the caller is and whether each check of the method passes."""

    def __init__(self, tables: Callable[[], SecurityTables], *, internal_tokens: tuple[str, ...] = (),
                 certificate_rules: tuple[Rule, ...] = ()):
        self._tables = tables
        self._certificate_rules = certificate_rules
        self._internal_tokens = internal_tokens
        self._policy = AccessPolicy(SecurityTables(), internal_tokens=internal_tokens)

    def policy(self) -> AccessPolicy:
        """The policy of the tables applied now (rebuilt when the metadata state machine published new ones)."""
        tables, policy = self._tables(), self._policy
        if policy.tables is not tables:
            policy = self._policy = AccessPolicy(tables, internal_tokens=self._internal_tokens)
        return policy

    def authenticate(self, method: str, token: str | None, certificate: str | None) -> str:
        if token is not None:
            principal = self.policy().principal_of_token(token)
            if principal is None:
                raise errors.Unauthenticated(f"{operation_name(method)}: the bearer token is unknown or revoked")
            return principal
        if certificate:
            principal = certificate_principal(self._certificate_rules, certificate)
            if principal is not None:
                return principal
            raise errors.Unauthenticated(f"{operation_name(method)}: the client certificate {certificate!r} matches "
                                         "no tls_principal_rules; send a bearer token")
        raise errors.Unauthenticated(f"{operation_name(method)} needs credentials: send a bearer token "
                                     "(authorization: Bearer <token>) or a client certificate")

    def authorize(self, method: str, principal: str, request) -> None:
        checks = METHOD_CHECKS.get(method, ...)
        if checks is ...:
            raise errors.PermissionDenied(f"{operation_name(method)} is not open to clients")
        policy = self.policy()
        for check in checks or ():
            for name in check.resources(request):
                if not policy.allows(principal, check.resource_type, name, check.operation):
                    raise errors.PermissionDenied(
                        f"principal {principal!r} may not {check.operation} on "
                        f"{describe(check.resource_type, name)} ({operation_name(method)})")


class AuthInterceptor(grpc.ServerInterceptor):
    def __init__(self, authorizer: Authorizer):
        self.authorizer = authorizer

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or (method in METHOD_CHECKS and METHOD_CHECKS[method] is PUBLIC):
            return handler
        token = bearer_token(handler_call_details.invocation_metadata)
        if token is None:
            return _guarded(handler, method, None, self.authorizer)
        try:
            principal = self.authorizer.authenticate(method, token, None)
        except errors.RaftbusError as error:
            return _refusing(handler, error)
        return _guarded(handler, method, principal, self.authorizer)


def _refusing(handler, error: errors.RaftbusError):
    """A handler of the method's shape that refuses the call without reading its request."""

    def refuse(_requests, context):
        _abort(context, error)

    make = grpc.stream_stream_rpc_method_handler if handler.response_streaming else grpc.stream_unary_rpc_method_handler
    return make(refuse, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)


def _guarded(handler, method: str, principal: str | None, authorizer: Authorizer):
    """The handler with authorization of every request it reads, after authentication: `principal` when the call's
    token named it already, else (no token) from the client certificate before any request is read."""

    def principal_of(context) -> str:
        if principal is not None:
            return principal
        try:
            return authorizer.authenticate(method, None, certificate_subject(context))
        except errors.RaftbusError as error:
            _abort(context, error)

    def check(principal: str, request, context) -> None:
        try:
            authorizer.authorize(method, principal, request)
        except errors.RaftbusError as error:
            _abort(context, error)

    def checked_stream(principal: str, requests, context):
        for request in requests:
            check(principal, request, context)
            yield request

    if handler.request_streaming:
        behavior = handler.stream_stream or handler.stream_unary

        def guarded(requests, context):
            return behavior(checked_stream(principal_of(context), requests, context), context)
    elif principal is not None:
        behavior = handler.unary_stream or handler.unary_unary

        def guarded(request, context):
            check(principal, request, context)
            return behavior(request, context)
    else:  # served as a request stream, so that the one request is read only once the caller is known
        behavior = handler.unary_stream or handler.unary_unary

        def guarded(requests, context):
            known = principal_of(context)
            request = next(requests, None)
            if request is None:
                _abort(context, errors.InvalidArgument(f"{operation_name(method)} needs a request"))
            check(known, request, context)
            return behavior(request, context)

        field = "stream_" + ("stream" if handler.response_streaming else "unary")
        return handler._replace(request_streaming=True, unary_unary=None, unary_stream=None, **{field: guarded})

    field = ("stream_" if handler.request_streaming else "unary_") + ("stream" if handler.response_streaming
                                                                        else "unary")
    return handler._replace(**{field: guarded})
