"""A `raftbus http` gateway process for benchmarks, and a keep-alive JSON connection to it (standard library)."""
from __future__ import annotations

import http.client
import json
import os
import select
import signal
import subprocess
import sys
from contextlib import contextmanager

from raftbus.client import Admin
from raftbus.client.credentials import TOKEN_FILE_ENV
from raftbus.client.errors import RaftbusError, Unavailable, error_from_code

from raftbus.gateway import settings


def anonymous_flags(bootstrap: str) -> list[str]:
    """The benchmark's requests carry no token: they act as the environment's principal (RAFTBUS_TOKEN_FILE) when
    there is one, else as `bench` on a cluster that checks no tokens."""
    token_file = os.environ.get(TOKEN_FILE_ENV)
    if not token_file:
        return ["--anonymous", "bench"]
    with Admin(bootstrap) as admin:
        principal = admin.whoami()["principal"] or "bench"
    return ["--anonymous", principal, "--anonymous-token-file", token_file]


@contextmanager
def gateway_process(bootstrap: str):
    """Start `python -m raftbus.gateway.server` on a loopback port it picks (port 0); yield its host:port; stop it by pid."""
    proc = subprocess.Popen([sys.executable, "-m", "raftbus.gateway.server", "--bootstrap", bootstrap,
                             "--listen", "127.0.0.1:0", *anonymous_flags(bootstrap)], stdout=subprocess.PIPE)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], settings.BENCH_GATEWAY_READY_TIMEOUT_MS / 1000)
        line = proc.stdout.readline() if ready else b""
        if not line:
            raise Unavailable("the HTTP gateway did not start")
        yield json.loads(line)["address"]
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(settings.BENCH_GATEWAY_STOP_TIMEOUT_MS / 1000)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()


class Connection:
    """One keep-alive HTTP connection; call() returns the decoded answer or raises the typed error it carries."""

    def __init__(self, address: str):
        host, _, port = address.rpartition(":")
        self.http = http.client.HTTPConnection(host, int(port), timeout=60)

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        self.http.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = self.http.getresponse()
        answer = json.loads(response.read())
        if response.status >= 300:
            error = answer.get("error", {})
            raise error_from_code(error.get("code", "INTERNAL"), error.get("message", str(response.status)))
        return answer

    def close(self) -> None:
        self.http.close()


def item_errors(items: list[dict]) -> list[RaftbusError]:
    return [error_from_code(i["error"]["code"], i["error"]["message"]) for i in items if "error" in i]
