"""MetricsSettings: the Prometheus endpoint (docs/operations.md, Metrics)."""
from __future__ import annotations

from dataclasses import dataclass

from raftbus.broker.section import parse_address, require, setting


@dataclass(frozen=True)
class MetricsSettings:
    TITLE = "Prometheus metrics (docs/operations.md)"

    metrics_listen: str = setting("", 'host:port serving /metrics in the Prometheus text format ("" = off; port 0 = '
                                      'any)')
    metrics_token_file: str = setting("", 'a file holding the bearer token every scrape must present ("" = none; '
                                          'needed beyond loopback)')
    metrics_lag_groups_per_partition_max: int = setting(1000, "consumer groups whose lag one partition reports")

    def validate(self) -> None:
        if self.metrics_listen:
            parse_address(self.metrics_listen)
        require(self.metrics_lag_groups_per_partition_max >= 0, "metrics_lag_groups_per_partition_max must be >= 0")
