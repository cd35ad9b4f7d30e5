"""The HTTP gateway as a real `raftbus http` process on a free loopback port, and a small JSON client for it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path


class GatewayProcess:
    def __init__(self, bootstrap: str, log_path: Path, flags: tuple[str, ...] = ()):
        self.bootstrap = bootstrap
        self.log_path = log_path
        self.flags = flags  # more `raftbus http` flags (--anonymous, --request-body-bytes-max, ...)
        self.proc: subprocess.Popen | None = None
        self.address = ""

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self) -> "GatewayProcess":
        raftbus = Path(sys.executable).parent / "raftbus"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([str(raftbus), "http", "--bootstrap", self.bootstrap,
                                          "--listen", "127.0.0.1:0", *self.flags], stdout=subprocess.PIPE,
                                         stderr=log)
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"raftbus http exited before ready (see {self.log_path})")
        event = json.loads(line)
        assert event["event"] == "ready", event
        self.address = event["address"]
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM by pid (uvicorn shuts down and the SDK clients close), SIGKILL if it hangs."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            raise AssertionError(f"raftbus http did not stop within {timeout_s} s of SIGTERM")


@contextmanager
def running_gateway(bootstrap: str, log_path: Path, *flags: str):
    gateway = GatewayProcess(bootstrap, log_path, flags)
    try:
        yield gateway.start()
    finally:
        gateway.stop()


class Api:
    """JSON over HTTP with the standard library: call() answers (status, decoded body)."""

    def __init__(self, base_url: str, headers: dict[str, str] | None = None):
        self.base_url = base_url
        self.headers = headers or {}

    def call(self, method: str, path: str, body=None, timeout_s: float = 60.0, raw: bytes | None = None,
             headers: dict[str, str] | None = None):
        status, answer, _ = self.exchange(method, path, body, timeout_s, raw, headers)
        return status, answer

    def exchange(self, method: str, path: str, body=None, timeout_s: float = 60.0, raw: bytes | None = None,
                 headers: dict[str, str] | None = None):
        """(status, decoded body, response headers); `headers` adds to (or, as None values, removes) the
        default Content-Type and this client's headers."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        sent = {"Content-Type": "application/json", **self.headers, **(headers or {})}
        request = urllib.request.Request(self.base_url + path, data=data, method=method,
                                         headers={name: value for name, value in sent.items() if value is not None})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return response.status, _decode(response.read(), response.headers), response.headers
        except urllib.error.HTTPError as err:
            return err.code, _decode(err.read(), err.headers), err.headers

    def ok(self, method: str, path: str, body=None, status: int = 200):
        """call() that asserts the status and returns the body."""
        got, answer = self.call(method, path, body)
        assert got == status, (method, path, got, answer)
        return answer

    def error(self, method: str, path: str, body=None, *, status: int, code: str, raw: bytes | None = None,
              headers: dict[str, str] | None = None) -> dict:
        got, answer = self.call(method, path, body, raw=raw, headers=headers)
        assert (got, answer["error"]["code"]) == (status, code), (method, path, got, answer)
        return answer["error"]


def _decode(data: bytes, headers):
    if not data:
        return None
    if headers.get("content-type", "").startswith("application/json"):
        return json.loads(data)
    return data.decode("utf-8", errors="replace")
