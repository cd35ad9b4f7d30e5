"""Browser test of the dashboard: headless Chromium (Debian's chromium and chromium-driver, driven by selenium)
loads `/` from a real `raftbus http` process in front of three real brokers while records flow, and the page
must show the brokers, topics, a consumer group with lag, a queue, and charts with data. The screenshot is kept
in test-artifacts/dashboard.png; the interactive docs are checked the same way (test-artifacts/docs.png)."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from tests.helpers import wait_until
from tests.system.conftest import running_cluster
from tests.system.http_gateway import Api, running_gateway

pytestmark = pytest.mark.system

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1800")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    root = tmp_path_factory.mktemp("dashboard")
    with running_cluster(root) as cluster, \
            running_gateway(cluster.bootstrap, root / "gateway.log", "--anonymous", "dashboard") as gateway:
        yield gateway


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


class Traffic:
    """Produces to the stream topic and enqueues to the queue topic through the gateway until stopped."""

    def __init__(self, api: Api):
        self.api = api
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.api.ok("POST", "/v1/topics/orders/records", {"records": [{"value": "o"}] * 20})
            self.api.ok("POST", "/v1/queues/jobs/messages", {"messages": [{"value": "j"}] * 5})

    def __enter__(self) -> "Traffic":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)


def text(browser, selector: str) -> str:
    return browser.find_element(By.CSS_SELECTOR, selector).text


def test_dashboard_shows_the_cluster_live_in_a_real_browser(gateway, browser):
    """Goal: the page a user opens shows 3 live brokers, the topics, group lag, queue counts, tables and plotted
    data."""
    api = Api(gateway.url)
    api.ok("POST", "/v1/topics", {"name": "orders", "partitions": 3}, status=201)
    api.ok("POST", "/v1/topics", {"name": "jobs", "partitions": 2, "kind": "queue"}, status=201)
    api.ok("POST", "/v1/topics/orders/records", {"records": [{"value": f"r{i}"} for i in range(50)]})
    api.ok("POST", "/v1/tables", {"name": "settings", "partitions": 1}, status=201)
    for key in ("a", "b", "c"):
        api.ok("PUT", f"/v1/tables/settings/keys/{key}", {"value": "on"})
    base = api.ok("POST", "/v1/consumers/billing/instances", {"auto_offset_reset": "earliest"})["base_uri"]
    api.ok("POST", f"{base}/subscription", {"topics": ["orders"]})
    wait_until(lambda: api.ok("GET", f"{base}/records?timeout_ms=500&max=10")["records"], 60, 0,
               what="the consumer instance's first records")
    api.ok("POST", f"{base}/offsets")  # commits 10 or more of 50: the group lags
    with Traffic(api):
        browser.get(f"{gateway.url}/?refresh_ms=500")
        wait_until(lambda: int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes") or 0)
                   >= 4, 60, 0.2, what="four dashboard refreshes")
        topics_chart = browser.find_element(By.ID, "chart-topics")
        wait_until(lambda: int(topics_chart.get_attribute("data-points") or 0) >= 3, 30, 0.2,
                   what="points on the topics chart")
        ARTIFACTS.mkdir(exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "dashboard.png"))
    # healthy = every broker alive, a controller, every partition led with its full ISR; a loaded machine can
    # leave a follower out of an ISR for a moment, so the page must come to show it (it refreshes itself)
    wait_until(lambda: (text(browser, "#broker-count"), text(browser, "#health")) == ("3/3", "healthy"), 60, 0.2,
               what="the page showing 3 of 3 brokers alive and a healthy cluster")
    topic_rows = text(browser, "#topic-table tbody")
    for name in ("orders", "jobs", "jobs.dlq"):
        assert name in topic_rows.split(), topic_rows
    assert topics_chart.find_elements(By.TAG_NAME, "canvas")
    assert int(topics_chart.get_attribute("data-series")) >= 1
    group_row = text(browser, "#group-table tbody").split()
    assert group_row[0] == "billing" and int(group_row[5]) > 0, group_row
    assert int(browser.find_element(By.ID, "chart-groups").get_attribute("data-points")) >= 3
    queue_row = text(browser, "#queue-table tbody").split()
    assert queue_row[0] == "jobs" and int(queue_row[1]) > 0, queue_row
    assert browser.find_element(By.ID, "chart-queues").find_elements(By.TAG_NAME, "canvas")
    table_row = text(browser, "#table-table tbody").split()
    assert table_row[:4] == ["settings", "compact", "1", "3"], table_row
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000


def test_interactive_docs_render_every_endpoint_from_the_served_swagger_ui(gateway, browser):
    """Goal: /docs works offline (Swagger UI served by the gateway) and lists the operations of /openapi.json."""
    browser.get(f"{gateway.url}/docs")
    wait_until(lambda: len(browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")) >= 20, 30, 0.2,
               what="Swagger UI listing the operations")
    paths = {e.text.replace("\u200b", "") for e in browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
    assert {"/v1/topics/{topic}/records", "/v1/queues/{topic}/leases", "/v1/cluster"} <= paths, paths
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "docs.png"))
    scripts = [e.get_attribute("src") for e in browser.find_elements(By.TAG_NAME, "script") if e.get_attribute("src")]
    assert scripts and all(src.startswith(gateway.url) for src in scripts), scripts
