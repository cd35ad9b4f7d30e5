"""The metrics endpoint of one broker: its own registry (several brokers may share a process in tests), the
collectors over its live state, the gRPC interceptor, and the HTTP server on `metrics_listen`."""
from __future__ import annotations

import threading
from collections import Counter

from prometheus_client import CollectorRegistry

from raftbus.broker.metrics.address import metrics_url
from raftbus.broker.metrics.calls import CallMetrics
from raftbus.broker.metrics.http import read_metrics_token, serve_metrics
from raftbus.broker.metrics.collectors import BrokerCollector, GroupLagCollector, PartitionCollector
from raftbus.broker.metrics.traffic import Traffic
from raftbus.broker.metrics.transport import RaftTransportCollector
from raftbus.broker.metrics.settings import MetricsSettings
from raftbus.broker.section import parse_address


class RoleChanges:
    """Raft role changes of the broker's groups, counted as they happen (a loop leadership listener)."""

    def __init__(self):
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def on_changed(self, group) -> None:
        with self._lock:
            self._counts[getattr(group, "role", "unknown")] += 1

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


class MetricsExporter:
    """Built before the broker's gRPC server (its interceptor counts every call); `start` once the broker runs."""

    def __init__(self, settings: MetricsSettings, client_address: str):
        self.settings = settings
        self.client_address = client_address  # the host of the URL when metrics_listen names every interface
        self.registry = CollectorRegistry(auto_describe=False)
        self.traffic = Traffic(self.registry)
        self.interceptor = CallMetrics(self.registry, self.traffic)
        self.role_changes = RoleChanges()
        self.url = ""
        self._server = None
        # read now: a bad file stops the broker before it serves anything
        self._token = read_metrics_token(settings.metrics_token_file) \
            if self.enabled and settings.metrics_token_file else None

    @property
    def enabled(self) -> bool:
        return bool(self.settings.metrics_listen)

    def interceptors(self) -> list:
        return [self.interceptor] if self.enabled else []

    def watch(self, loop) -> None:
        """Count the Raft role changes of `loop`'s groups from the first election on."""
        if self.enabled:
            loop.leadership_listeners.append(self.role_changes.on_changed)

    def register(self, registry) -> None:
        """The interceptor counting every call of the client port (first: it sees what the others refuse)."""
        registry.intercept(self.interceptors())

    def start(self, broker) -> "MetricsExporter":
        """Register the collectors over `broker` and serve /metrics; no-op when metrics_listen is empty."""
        if not self.enabled:
            return self
        self.registry.register(PartitionCollector(broker))
        self.registry.register(GroupLagCollector(broker, self.settings.metrics_lag_groups_per_partition_max))
        self.registry.register(BrokerCollector(broker, self.role_changes))
        self.registry.register(RaftTransportCollector(broker))
        host, port = parse_address(self.settings.metrics_listen)
        self._server = serve_metrics(self.registry, host.strip("[]"), port, self._token)
        self.url = metrics_url(self.settings.metrics_listen, self.client_address,
                               self._server.server_port)
        return self

    @property
    def port(self) -> int | None:
        return self._server.server_port if self._server is not None else None

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
