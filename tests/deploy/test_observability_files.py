"""Goal: the Grafana dashboard (docs/grafana-dashboard.json) and the Prometheus alert rules
(config/deploy/prometheus/alerts.yaml) are well-formed: every panel queries something, ids are unique, panels
fit the 24-column grid, every alert has an expression, a hold time, a severity and a summary.
(tests/system/test_metrics.py checks that brokers export every metric they query.)"""
from __future__ import annotations

import json

from tests.observability import DASHBOARD, alert_rules, dashboard_exprs, queried_metric_names


def test_dashboard_panels_query_prometheus_and_fit_the_grid():
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "job"}
    for panel in panels:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
            assert 'job="$job"' in target["expr"] or "up{" in target["expr"], target["expr"]
    assert len(dashboard_exprs()) >= 20


def test_alert_rules_are_complete_and_uniquely_named():
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule["expr"]
        assert rule["for"].endswith(("s", "m", "h"))
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert rule["annotations"]["summary"]
    wanted = {"RaftbusNoController", "RaftbusUnderReplicatedPartitions", "RaftbusConsumerGroupLagging",
              "RaftbusDiskFilling"}
    assert wanted <= set(names)


def test_the_queried_metrics_are_raftbus_metrics():
    names = queried_metric_names()
    assert {"raftbus_controller", "raftbus_partition_under_replicated", "raftbus_group_lag_seconds",
            "raftbus_disk_free_bytes"} <= names
