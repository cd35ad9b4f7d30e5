"""The HTTP server of /metrics: prometheus_client's WSGI exposition, behind a bearer-token check when
`metrics_token_file` is set (a scrape without the token is 401 and reads nothing)."""
from __future__ import annotations

import hmac
import socket
import threading
from wsgiref.simple_server import make_server

from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler, make_wsgi_app

from raftbus.client import credentials


def read_metrics_token(path: str) -> bytes:
    """The token of `metrics_token_file`; InvalidArgument naming the setting when it cannot be used."""
    return credentials.read_token_file(path, label="metrics_token_file").encode()


def guarded(app, token: bytes | None):
    """`app`, answering 401 to a request whose Authorization is not `Bearer <token>` (None: no check)."""
    if token is None:
        return app
    expected = b"Bearer " + token

    def check(environ, start_response):
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        if not hmac.compare_digest(given, expected):
            start_response("401 Unauthorized", [("Content-Type", "text/plain"),
                                                ("WWW-Authenticate", 'Bearer realm="raftbus metrics"')])
            return [b"a bearer token is required\n"]
        return app(environ, start_response)

    return check


def serve_metrics(registry, host: str, port: int, token: bytes | None):
    """Serve `registry` on host:port from a daemon thread; returns the server (server_port, shutdown)."""

    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    server = make_server(host, port, guarded(make_wsgi_app(registry), token), Server, handler_class=_SilentHandler)
    threading.Thread(target=server.serve_forever, name="raftbus-metrics", daemon=True).start()
    return server
