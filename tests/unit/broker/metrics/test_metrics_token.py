"""Goal: with metrics_token_file set, /metrics answers a scrape only with `Authorization: Bearer <token>` (401
and no metric otherwise); without it, it answers every scrape; a missing or empty token file stops the exporter
before it serves, naming the setting."""
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from raftbus.broker.metrics.exporter import MetricsExporter
from raftbus.broker.metrics.http import serve_metrics
from raftbus.broker.metrics.settings import MetricsSettings
from raftbus.client import errors


def scrape(port: int, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


@pytest.fixture
def registry():
    registry = CollectorRegistry()
    Counter("raftbus_probe", "a counter", registry=registry).inc()
    return registry


def test_a_scrape_needs_the_token_when_one_is_set(registry):
    server = serve_metrics(registry, "127.0.0.1", 0, b"scrape-secret")
    try:
        port = server.server_port
        for token in (None, "", "wrong", "scrape-secret-and-more", "scrape-secre"):
            status, body = scrape(port, token)
            assert status == 401 and "raftbus_probe" not in body, token
        status, body = scrape(port, "scrape-secret")
        assert status == 200 and "raftbus_probe_total 1.0" in body
    finally:
        server.shutdown()
        server.server_close()


def test_without_a_token_every_scrape_is_answered(registry):
    server = serve_metrics(registry, "127.0.0.1", 0, None)
    try:
        assert scrape(server.server_port)[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_an_unusable_token_file_is_refused_naming_the_setting(tmp_path):
    empty = tmp_path / "empty.token"
    empty.write_text("")
    for path in (tmp_path / "missing.token", empty):
        with pytest.raises(errors.InvalidArgument, match="metrics_token_file"):
            MetricsExporter(MetricsSettings(metrics_listen="127.0.0.1:0", metrics_token_file=str(path)), "h:1")
