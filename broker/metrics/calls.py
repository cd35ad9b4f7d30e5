"""A gRPC server interceptor: counts every call by service, method and status code, and hands the requests
and answers of the data-path methods to Traffic (records and bytes in and out per partition)."""
from __future__ import annotations

import grpc
from prometheus_client import CollectorRegistry, Counter

from raftbus.broker.metrics.traffic import Traffic

_PENDING_PRODUCES_MAX = 4096  # produce-stream batches remembered until answered (the stream's window is smaller)


def method_of(full_method: str) -> tuple[str, str]:
    """'/raftbus.v1.Log/Produce' → ('raftbus.v1.Log', 'Produce')."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service or "unknown", method or "unknown"


def status_name(context) -> str:
    """The status the call ends with: what the servicer set (abort or set_code), else OK."""
    code = context.code() if hasattr(context, "code") else None
    return code.name if isinstance(code, grpc.StatusCode) else "OK"


class CallMetrics(grpc.ServerInterceptor):
    def __init__(self, registry: CollectorRegistry, traffic: Traffic):
        self.calls = Counter("raftbus_grpc_calls", "gRPC calls served, by service, method and status code",
                             ("service", "method", "code"), registry=registry)
        self.traffic = traffic
        self._observers = traffic.observers()

    def _count(self, service: str, method: str, context) -> None:
        self.calls.labels(service, method, status_name(context)).inc()

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        service, method = method_of(handler_call_details.method)
        observe = self._observers.get(method)
        if method == "ProduceStream":
            return _replace(handler, stream_stream=self._produce_stream(handler.stream_stream, service, method))
        if handler.unary_unary is not None:
            return _replace(handler, unary_unary=self._unary(handler.unary_unary, service, method, observe))
        if handler.unary_stream is not None:
            return _replace(handler, unary_stream=self._streaming(handler.unary_stream, service, method, observe))
        if handler.stream_unary is not None:
            return _replace(handler, stream_unary=self._unary(handler.stream_unary, service, method, None))
        return _replace(handler, stream_stream=self._streaming(handler.stream_stream, service, method, None))

    def _unary(self, behavior, service, method, observe):
        def run(request, context):
            try:
                response = behavior(request, context)
                if observe is not None and response is not None:
                    observe(request, response)
                return response
            finally:
                self._count(service, method, context)
        return run

    def _streaming(self, behavior, service, method, observe):
        def run(request, context):
            try:
                for response in behavior(request, context):
                    if observe is not None:
                        observe(request, response)
                    yield response
            finally:
                self._count(service, method, context)
        return run

    def _produce_stream(self, behavior, service, method):
        """Requests are remembered by request_id until their answer says whether they were appended."""
        def run(request_iterator, context):
            pending: dict[int, object] = {}

            def remembered():
                for request in request_iterator:
                    if len(pending) < _PENDING_PRODUCES_MAX:
                        pending[request.request_id] = request
                    yield request
            try:
                for response in behavior(remembered(), context):
                    request = pending.pop(response.request_id, None)
                    if request is not None:
                        self.traffic.produced(request, response)
                    yield response
            finally:
                self._count(service, method, context)
        return run


def _replace(handler, **behavior):
    """The same method handler with one behaviour swapped (serializers and streaming kinds unchanged)."""
    return handler._replace(**behavior)
