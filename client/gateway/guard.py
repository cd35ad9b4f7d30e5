"""The checks every HTTP request passes before a route sees it (an ASGI middleware around the app), in order:

1. **Host**: the Host header must name a host the gateway serves (`--allowed-hosts`; default the listen host and
   the loopback names), so a page whose DNS name was rebound to the gateway's address cannot call it
   (400 HOST_NOT_ALLOWED).
2. **Origin**: a browser request carrying an Origin header must come from the gateway's own origin (the one its
   Host names) or one of `--allowed-origins` (403 ORIGIN_NOT_ALLOWED). The gateway sends no CORS headers, so no
   other page reads its answers.
3. **State-changing calls** (POST, PUT, PATCH, DELETE) need `Content-Type: application/json` or an
   `X-Raftbus-Request` header: a cross-site form can send neither, and a page's script cannot send them to another
   origin without a CORS preflight, which the gateway never grants (415 JSON_REQUIRED).
4. **Body size**: a Content-Length above `request_body_bytes_max` is refused before a byte of the body is read, and
   a body streamed without one as soon as its bytes pass the bound (413 REQUEST_TOO_LARGE).
5. **Caller** (paths under /v1): the bearer token is checked with the cluster, or the anonymous caller resolved,
   before the body is read (401 UNAUTHENTICATED, see gateway.py).

Then the body (at most the bound) is read and handed to the app with the caller in the request's state.
"""
from __future__ import annotations

from urllib.parse import urlsplit

import anyio.to_thread
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from raftbus.client.errors import (
    HostNotAllowed,
    InvalidArgument,
    JsonRequired,
    OriginNotAllowed,
    RaftbusError,
    RequestTooLarge,
    Unauthenticated,
)

from raftbus.gateway import settings
from raftbus.gateway.errors import error_response
from raftbus.gateway.gateway import Gateway

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(value: str) -> tuple[str, int | None]:
    """(name, port or None) of a Host header or an allowed-hosts entry: `name`, `name:port`, `[v6]:port`, `v6`."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        name, _, port = value.partition(":")
    else:
        name, port = value, ""
    if port and not port.isdigit():
        raise HostNotAllowed(f"Host {value!r} has a port that is not a number")
    return name, int(port) if port else None


def check_host(host: str | None, allowed: tuple[str, ...]) -> None:
    if "*" in allowed:
        return
    if not host:
        raise HostNotAllowed("the request has no Host header")
    name, port = split_host(host)
    for entry in allowed:
        allowed_name, allowed_port = split_host(entry)
        if name == allowed_name and (allowed_port is None or allowed_port == port):
            return
    raise HostNotAllowed(f"this gateway does not serve Host {host!r} (allowed: {', '.join(allowed)}; "
                         "see --allowed-hosts)")


def check_origin(origin: str | None, host: str | None, allowed: tuple[str, ...]) -> None:
    """A request without Origin passes (not sent by a browser, or a same-origin GET); else same origin or listed."""
    if origin is None:
        return
    if host and same_origin(origin, host) or origin.lower().rstrip("/") in {a.lower() for a in allowed}:
        return
    raise OriginNotAllowed(f"this gateway does not serve pages of origin {origin!r} (see --allowed-origins)")


def same_origin(origin: str, host: str) -> bool:
    parts = urlsplit(origin.strip().lower())
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return False  # "null" (sandboxed pages, files) and anything else that is not an http(s) origin
    try:
        origin_port = parts.port or DEFAULT_PORTS[parts.scheme]
        name, port = split_host(host)
    except (ValueError, HostNotAllowed):
        return False
    return (parts.hostname, origin_port) == (name, port or DEFAULT_PORTS[parts.scheme])


def check_state_change(method: str, headers: Headers) -> None:
    if method not in STATE_CHANGING:
        return
    media_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type == "application/json" or headers.get(settings.REQUEST_HEADER):
        return
    raise JsonRequired(f"a {method} needs Content-Type: application/json (or an X-Raftbus-Request header, for a call "
                       "without a body): a cross-site form cannot send either")


def declared_length(headers: Headers, bytes_max: int) -> int | None:
    """The Content-Length (None when absent); RequestTooLarge above `bytes_max`, before any of the body is read."""
    value = headers.get("content-length")
    if value is None:
        return None
    if not value.strip().isdigit():
        raise InvalidArgument(f"Content-Length {value!r} is not a number")
    length = int(value)
    if length > bytes_max:
        raise RequestTooLarge(f"the body is {length} bytes, above request_body_bytes_max={bytes_max}")
    return length


def bearer_token(headers: Headers) -> str | None:
    """The token of `Authorization: Bearer <token>`; None without the header; Unauthenticated for another scheme."""
    value = headers.get("authorization")
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise Unauthenticated(f"the Authorization header must be 'Bearer <token>', not the {scheme!r} scheme")
    return token.strip()


class ClientGone(Exception):
    """The client disconnected while its body was read."""


async def read_body(receive: Receive, bytes_max: int) -> bytes:
    """The whole body, counting bytes as they stream: RequestTooLarge as soon as they pass `bytes_max`."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > bytes_max:
            raise RequestTooLarge(f"the body passed request_body_bytes_max={bytes_max} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


class RequestGuard:
    """ASGI middleware running the checks of the module docstring before the app."""

    def __init__(self, app: ASGIApp, *, gateway: Gateway, hosts: tuple[str, ...]):
        self.app = app
        self.gateway = gateway
        self.hosts = hosts
        self.origins = gateway.options.allowed_origins
        self.body_bytes_max = gateway.options.request_body_bytes_max

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        try:
            check_host(headers.get("host"), self.hosts)
            check_origin(headers.get("origin"), headers.get("host"), self.origins)
            check_state_change(scope["method"], headers)
            length = declared_length(headers, self.body_bytes_max)
            caller = None
            if scope["path"].startswith("/v1/"):
                caller = await anyio.to_thread.run_sync(self.gateway.caller, bearer_token(headers))
            has_body = bool(length) or (length is None and "transfer-encoding" in headers)
            body = await read_body(receive, self.body_bytes_max) if has_body else None
        except ClientGone:
            return
        except RaftbusError as error:
            extra = {"WWW-Authenticate": "Bearer"} if isinstance(error, Unauthenticated) else {}
            if "content-length" in headers or "transfer-encoding" in headers:
                extra["Connection"] = "close"  # the rest of the body is not worth reading: the server closes
            await error_response(error, extra)(scope, receive, send)
            return
        if caller is not None:
            scope = {**scope, "state": {**scope.get("state", {}), "caller": caller}}
            if not caller.token_checked:
                send = marked(send)
        await self.app(scope, receive if body is None else replay(body, receive), send)


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body already read, then the client's later messages (a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive_again() -> Message:
        return pending.pop() if pending else await receive()
    return receive_again


def marked(send: Send) -> Send:
    """A send that adds `X-Raftbus-Token-Checked: false` to the answer."""
    async def send_marked(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []),
                                              (settings.TOKEN_CHECKED_HEADER.encode(), b"false")]}
        await send(message)
    return send_marked
