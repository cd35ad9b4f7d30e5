"""The request router of the Kafka port: one handler per API key, the version range it serves, and how a request
becomes a response frame.

A handler is `async handle(request) -> dict | None`: the response's plain values (broker/kafka/schema.py's
`make`), or None when no response is due (Produce with acks=0). Everything a client can send is answered:

- an API key the router does not serve, or an ApiVersions request of a version it does not know: ApiVersions v0's
  shape with UNSUPPORTED_VERSION and the served keys (what Kafka answers, and what every client reads);
- a served key at a version outside its range: that API's response shape at the requested version with
  UNSUPPORTED_VERSION in its error fields, when the schema exists, else the ApiVersions answer above;
- a request that does not parse, or a handler that fails unexpectedly: the response shape with INVALID_REQUEST or
  UNKNOWN_SERVER_ERROR (logged); the connection goes on.
"""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from raftbus.broker.kafka import codes
from raftbus.broker.kafka.fast_answers import FAST
from raftbus.broker.kafka.schema import (
    MalformedRequest,
    RequestHeader,
    encode_response,
    error_answer,
    make,
    parse_header,
    peek_ids,
    read_body,
    request_schema,
    response_schema,
)

log = logging.getLogger(__name__)
API_VERSIONS = 18


class Request(NamedTuple):
    header: RequestHeader
    body: object  # the kio request entity
    session: object  # broker/kafka/session.py: who is asking on this connection
    sequence: int = 0  # its place among the connection's requests (Session.later_request)

    @property
    def version(self) -> int:
        return self.header.api_version


class Api(NamedTuple):
    key: int
    name: str
    min_version: int
    max_version: int
    handle: Callable[[Request], Awaitable[dict | None]]


class Router:
    def __init__(self, apis: list[Api]):
        self.apis = {api.key: api for api in apis}

    def versions(self) -> list[dict]:
        """The ApiVersions answer's api_keys: exactly the keys and versions this router serves."""
        return [{"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
                for a in sorted(self.apis.values(), key=lambda a: a.key)]

    def unsupported(self, correlation_id: int) -> bytes:
        """ApiVersions v0's answer with UNSUPPORTED_VERSION (and the served keys, so the client can adapt)."""
        schema = response_schema(API_VERSIONS, 0)
        entity = make(schema, {"error_code": codes.UNSUPPORTED_VERSION, "api_keys": self.versions()})
        return encode_response(schema, correlation_id, entity)

    async def answer(self, frame, session, sequence: int = 0) -> bytes | None:
        """The response frame for one request frame (None: no response is due)."""
        ids = peek_ids(frame)
        if ids is None:
            raise MalformedRequest(f"a request frame of {len(frame)} bytes has no header")
        api_key, version, correlation_id = ids
        api = self.apis.get(api_key)
        if api is None:
            return self.unsupported(correlation_id)
        if not api.min_version <= version <= api.max_version:
            return self._out_of_range(api, version, correlation_id)
        schema = request_schema(api_key, version)
        answer_schema = response_schema(api_key, version)
        header = parse_header(frame, schema.__header_schema__.__flexible__)
        try:
            body = read_body(schema, frame, header.body_start)
        except MalformedRequest as exc:
            log.info("kafka request does not parse", extra={"api": api.name, "version": version,
                                                             "client_id": header.client_id, "reason": str(exc)})
            return encode_response(answer_schema, correlation_id,
                                   error_answer(answer_schema, codes.INVALID_REQUEST, str(exc)))
        try:
            values = await api.handle(Request(header, body, session, sequence))
        except Exception:
            log.exception("kafka request failed", extra={"api": api.name, "version": version})
            return encode_response(answer_schema, correlation_id,
                                   error_answer(answer_schema, codes.UNKNOWN_SERVER_ERROR, "internal error"))
        if values is None:
            return None
        fast = FAST.get(api_key)
        frame = fast(version, correlation_id, values) if fast is not None else None
        return frame if frame is not None else encode_response(answer_schema, correlation_id,
                                                                make(answer_schema, values))

    def _out_of_range(self, api: Api, version: int, correlation_id: int) -> bytes:
        schema = response_schema(api.key, version)
        if api.key == API_VERSIONS or schema is None:
            return self.unsupported(correlation_id)
        message = f"{api.name} v{version} is not supported: versions {api.min_version}-{api.max_version} are"
        return encode_response(schema, correlation_id, error_answer(schema, codes.UNSUPPORTED_VERSION, message))
