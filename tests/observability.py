"""The metric names that the shipped Grafana dashboard and Prometheus alert rules query (shared by the tests
that check those files and the system test that checks a real broker exports every one of them)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
ALERTS = ROOT / "config" / "deploy" / "prometheus" / "alerts.yaml"
_NAME = re.compile(r"\braftbus_[a-z_]+\b")
_HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", ())]


def alert_rules() -> list[dict]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def queried_metric_names() -> set[str]:
    """Every raftbus_* sample name in the dashboard's and the alert rules' PromQL."""
    exprs = dashboard_exprs() + [rule["expr"] for rule in alert_rules()]
    return {name for expr in exprs for name in _NAME.findall(expr)}


def exported(name: str, sample_names: set[str]) -> bool:
    return name in sample_names or any(name + suffix in sample_names for suffix in _HISTOGRAM_SUFFIXES)
