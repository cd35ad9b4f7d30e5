"""Errors over HTTP: the SDK's typed error as JSON, with the HTTP status of its gRPC status.

One table: every error's gRPC status comes from `raftbus.client.errors.GRPC_STATUS`, and `HTTP_STATUS` maps each
gRPC status to the HTTP status Google's API design guide (google.rpc.Code) pairs it with. The body is
`{"error": {"code": "UNKNOWN_TOPIC", "message": "...", "retriable": false}}`.
"""
from __future__ import annotations

import grpc
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from raftbus.client.errors import (
    InvalidArgument,
    JsonRequired,
    RaftbusError,
    RequestTooLarge,
    UnknownRoute,
    status_for,
)

from raftbus.gateway.answers import ErrorAnswer

HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
}


# Errors raised by the gateway itself whose HTTP status is more precise than their gRPC status's.
GATEWAY_HTTP_STATUS: dict[type[RaftbusError], int] = {
    JsonRequired: 415,
    RequestTooLarge: 413,
}


def http_status(error: RaftbusError) -> int:
    return GATEWAY_HTTP_STATUS.get(type(error)) or HTTP_STATUS[status_for(error)]


def error_body(error: RaftbusError) -> dict:
    return {"code": error.code, "message": error.message, "retriable": error.retriable}


def error_response(error: RaftbusError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error_body(error)}, status_code=http_status(error), headers=headers)


async def on_raftbus_error(request: Request, error: RaftbusError) -> JSONResponse:
    return error_response(error)


async def on_validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    """A body or parameter that does not fit the schema is an INVALID_ARGUMENT like any other."""
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
    return error_response(InvalidArgument(problems or "malformed request"))


ERROR_RESPONSES = {status: {"model": ErrorAnswer, "description": "a raftbus error (code, message, retriable)"}
                   for status in (400, 401, 403, 404, 409, 413, 415, 429, 503)}


async def on_http_error(request: Request, error: HTTPException) -> JSONResponse:
    """Starlette's own answers (no such path, a method the path does not take) in the same error shape.

    The HTTP status stays Starlette's (404, 405); the code is UNKNOWN_ROUTE for both, INVALID_ARGUMENT otherwise."""
    if error.status_code in (404, 405):
        typed: RaftbusError = UnknownRoute(f"no route {request.method} {request.url.path}"
                                           + (" (method not allowed)" if error.status_code == 405 else ""))
    else:
        typed = InvalidArgument(str(error.detail))
    return JSONResponse({"error": error_body(typed)}, status_code=error.status_code, headers=error.headers)
