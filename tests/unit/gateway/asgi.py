"""A small in-process HTTP client for the gateway's ASGI app (no server, no sockets): one request, its body sent in
chunks, the answer's status, headers and decoded JSON."""
from __future__ import annotations

import json
from dataclasses import dataclass

import anyio


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    body_chunks_read: int

    def json(self):
        return json.loads(self.body)

    @property
    def code(self) -> str:
        return self.json()["error"]["code"]


def request(app, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes = b"",
            chunks: list[bytes] | None = None, host: str = "127.0.0.1:8080") -> Answer:
    """Send one request to `app`. `chunks` streams the body without a Content-Length (as chunked encoding)."""
    sent = {"host": host, **{k.lower(): v for k, v in (headers or {}).items()}}
    if chunks is None:
        chunks = [body] if body else []
        if body:
            sent.setdefault("content-length", str(len(body)))
    else:
        sent["transfer-encoding"] = "chunked"
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path.split("?")[0], "raw_path": path.split("?")[0].encode(),
             "query_string": path.partition("?")[2].encode(), "root_path": "",
             "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in sent.items() if v is not None],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8080), "state": {}}
    pending = list(chunks)
    read = [0]
    answer: dict = {"headers": {}, "body": b""}

    async def receive():
        if pending:
            read[0] += 1
            chunk = pending.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(pending)}
        if read[0] == 0 and not chunks:
            read[0] += 1
            return {"type": "http.request", "body": b"", "more_body": False}
        await anyio.sleep_forever()

    async def send(message):
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
            answer["headers"] = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    async def run():
        with anyio.fail_after(30):
            await app(scope, receive, send)

    anyio.run(run)
    return Answer(answer["status"], answer["headers"], answer["body"], read[0])
