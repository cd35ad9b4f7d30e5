"""Bounds on the gRPC calls that hold a server worker for long: streams and long-polls.

The gRPC server runs each call on one of `grpc_workers_max` threads. A produce or lease stream, a fetch stream
and a long-polling Fetch, FetchMany, Lease or Heartbeat keep their thread for as long as they last, so without a bound a
few clients could hold every worker and starve the short calls (metadata, acks, commits). This interceptor
admits at most `grpc_long_calls_max` such calls per broker and `grpc_long_calls_per_connection_max` per client
connection; beyond that a call is refused at once with OVERLOADED (retriable: the SDK backs off and retries).
gRPC's own `maximum_concurrent_rpcs` (`grpc_concurrent_rpcs_max`) bounds every call together.
"""
from __future__ import annotations

import threading
from collections import Counter

import grpc

from raftbus.client import errors

# method -> True (always long) or the request field that makes it a long-poll when > 0
LONG_CALLS: dict[str, bool | str] = {
    "/raftbus.v1.Log/ProduceStream": True,
    "/raftbus.v1.Log/FetchStream": True,
    "/raftbus.v1.Queue/LeaseStream": True,
    "/raftbus.v1.Log/Fetch": "max_wait_ms",
    "/raftbus.v1.Log/FetchMany": "max_wait_ms",
    "/raftbus.v1.Queue/Lease": "max_wait_ms",
    "/raftbus.v1.Groups/Heartbeat": "max_wait_ms",
}


class LongCallSlots:
    """Counts long calls per broker and per connection; `acquire` refuses beyond either bound."""

    def __init__(self, broker_max: int, connection_max: int):
        self.broker_max = broker_max
        self.connection_max = connection_max
        self._lock = threading.Lock()
        self._held = 0
        self._by_peer: Counter[str] = Counter()

    def acquire(self, peer: str, method: str) -> None:
        with self._lock:
            if self._held >= self.broker_max:
                raise errors.Overloaded(f"{method}: {self._held} streams and long-polls are open on this broker "
                                        f"(grpc_long_calls_max={self.broker_max}); retry later")
            if self._by_peer[peer] >= self.connection_max:
                raise errors.Overloaded(f"{method}: {self._by_peer[peer]} streams and long-polls are open on this "
                                        f"connection (grpc_long_calls_per_connection_max={self.connection_max})")
            self._held += 1
            self._by_peer[peer] += 1

    def release(self, peer: str) -> None:
        with self._lock:
            self._held -= 1
            self._by_peer[peer] -= 1
            if not self._by_peer[peer]:
                del self._by_peer[peer]

    def held(self) -> int:
        with self._lock:
            return self._held


def _refuse(context, error: errors.RaftbusError):
    context.set_trailing_metadata(errors.trailing_metadata(error))
    context.abort(errors.status_for(error), error.message)


def _admit(slots: LongCallSlots, context, method: str) -> str:
    """Take a slot for this call's connection, or end the call with OVERLOADED; returns the peer to release."""
    peer = context.peer()
    try:
        slots.acquire(peer, method)
    except errors.Overloaded as exc:
        _refuse(context, exc)
    return peer


class LongCallInterceptor(grpc.ServerInterceptor):
    def __init__(self, slots: LongCallSlots):
        self.slots = slots

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        rule = LONG_CALLS.get(handler_call_details.method)
        if handler is None or rule is None:
            return handler
        method = handler_call_details.method
        if handler.unary_unary is not None:
            return handler._replace(unary_unary=self._unary(handler.unary_unary, method, rule))
        if handler.unary_stream is not None:
            return handler._replace(unary_stream=self._streaming(handler.unary_stream, method))
        if handler.stream_stream is not None:
            return handler._replace(stream_stream=self._streaming(handler.stream_stream, method))
        return handler

    def _unary(self, behaviour, method: str, field: str):
        slots = self.slots

        def limited(request, context):
            if getattr(request, field, 0) <= 0:
                return behaviour(request, context)
            peer = _admit(slots, context, method)
            try:
                return behaviour(request, context)
            finally:
                slots.release(peer)
        return limited

    def _streaming(self, behaviour, method: str):
        slots = self.slots

        def limited(request_or_iterator, context):
            peer = _admit(slots, context, method)
            try:
                yield from behaviour(request_or_iterator, context)
            finally:
                slots.release(peer)
        return limited
