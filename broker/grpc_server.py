"""The broker's gRPC server and what every servicer shares: typed errors ⇄ status codes, never a crash.

Servicers live in their feature packages (log, groups, queues, admin); they translate proto ⇄ service calls
and hold no business rule.
"""
from __future__ import annotations

import logging
from concurrent import futures
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from raftbus.client import errors
from raftbus.client.wire import raftbus_pb2 as pb

from raftbus.broker.call_limits import LongCallInterceptor, LongCallSlots
from raftbus.broker.section import at_least, require, setting

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GrpcSettings:
    TITLE = "gRPC server (the client port)"

    grpc_workers_max: int = setting(128, "threads serving calls")
    grpc_concurrent_rpcs_max: int = setting(1024, "calls served or queued at once; beyond: RESOURCE_EXHAUSTED")
    grpc_long_calls_max: int = setting(96, "streams and long-polls held at once (each holds a worker): OVERLOADED "
                                           "beyond")
    grpc_long_calls_per_connection_max: int = setting(
        64, "... and from one client connection (channels of a process share one)")
    grpc_message_bytes_max: int = setting(64 * 1024 * 1024, "largest message either way (64 MiB)")
    grpc_connections_max: int = setting(768, "open client connections; one more is closed at once (with the Kafka "
                                             "port's, it must fit in storage_fds_reserved)")
    grpc_connections_per_address_max: int = setting(256, "... from one source address; those past it are closed "
                                                         "within a second (broker/address_bound.py)")
    grpc_handshake_timeout_ms: int = setting(10_000, "a connection that has not completed its TLS and HTTP/2 "
                                                     "handshakes by then is closed")

    def long_call_slots(self) -> LongCallSlots:
        return LongCallSlots(self.grpc_long_calls_max, self.grpc_long_calls_per_connection_max)

    def validate(self) -> None:
        at_least(self, 1, "grpc_concurrent_rpcs_max")
        at_least(self, 1, "grpc_connections_max")
        at_least(self, 1, "grpc_connections_per_address_max")
        at_least(self, 1, "grpc_handshake_timeout_ms")
        require(0 < self.grpc_long_calls_per_connection_max <= self.grpc_long_calls_max < self.grpc_workers_max,
                "need 0 < grpc_long_calls_per_connection_max <= grpc_long_calls_max < grpc_workers_max (short calls "
                "need workers of their own)")


def _abort(context: grpc.ServicerContext, error: errors.RaftbusError):
    context.set_trailing_metadata(errors.trailing_metadata(error))
    context.abort(errors.status_for(error), error.message)


def _error_proto(error: errors.RaftbusError) -> pb.Error:
    return pb.Error(code=error.code, message=error.message, leader_id=error.leader_id or 0,
                    leader_address=error.leader_address or "")


def _typed(exc: Exception) -> errors.RaftbusError:
    if isinstance(exc, errors.RaftbusError):
        return exc
    log.exception("unexpected error while serving a request", exc_info=exc)
    return errors.InternalError(f"{type(exc).__name__}: {exc}")


def unary(method):
    """Run a servicer method, turning any error into a status + stable code (never a crash)."""

    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except Exception as exc:  # every failure gets a typed answer
            _abort(context, _typed(exc))

    wrapper.__name__ = method.__name__
    return wrapper


def build_server(address: str, servicers, *, workers_max: int, message_bytes_max: int,
                 concurrent_rpcs_max: int | None = None, long_calls: LongCallSlots | None = None, credentials=None,
                 interceptors=(), connections_max: int | None = None, handshake_timeout_ms: int | None = None,
                 reuse_port: bool = False):
    """A gRPC server with the given servicers and the standard health service; returns (server, health, port).

    `servicers` is a list of (add_XServicer_to_server, servicer) pairs, one per raftbus service. At most
    `concurrent_rpcs_max` calls are served at once (beyond: RESOURCE_EXHAUSTED) and `long_calls` bounds the
    streams and long-polls (see call_limits.py). At most `connections_max` connections are open (gRPC's core
    closes one more at once) and one that has not finished its handshakes within `handshake_timeout_ms` is
    closed. `credentials` (grpc.ServerCredentials) switches the port to
    TLS; `interceptors` run first, in order (metrics count every call, then authentication and authorization),
    before the long-call bounds. `reuse_port` binds with SO_REUSEPORT (a port a supervisor holds reserved);
    without it a port someone else holds fails the bind, as a second broker on the same port must.
    """
    chain = [*interceptors, *([LongCallInterceptor(long_calls)] if long_calls is not None else [])]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers_max, thread_name_prefix="raftbus-grpc"),
        interceptors=chain,
        options=[("grpc.max_receive_message_length", message_bytes_max),
                 ("grpc.max_send_message_length", message_bytes_max),
                 ("grpc.so_reuseport", int(reuse_port)),
                 *([("grpc.max_allowed_incoming_connections", connections_max)] if connections_max else []),
                 *([("grpc.server_handshake_timeout_ms", handshake_timeout_ms)] if handshake_timeout_ms else [])],
        maximum_concurrent_rpcs=concurrent_rpcs_max,
    )
    for add_to_server, servicer in servicers:
        add_to_server(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    health_servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    return server, health_servicer, port
