"""Stream partitions as a part of the broker: the Log service and servicer, and retention on the partitions led
here (a trim command when a partition's oldest batch or its size is past its topic's retention)."""
from __future__ import annotations

import logging
from pathlib import Path

from raftbus.broker.context import BrokerContext
from raftbus.broker.log.service import LogService
from raftbus.broker.log.servicer import log_servicers
from raftbus.broker.log.settings import LogSettings

log = logging.getLogger(__name__)


class LogFeature:
    def __init__(self, context: BrokerContext, settings: LogSettings, *, rebuild_dir: Path,
                 peer_credentials: dict | None = None):
        self.context = context
        self.settings = settings
        self.service = LogService(context, settings)
        self._rebuild_dir = rebuild_dir
        self._peer_credentials = peer_credentials

    def register(self, registry) -> None:
        registry.serve(log_servicers(self.service, self._rebuild_dir, self._peer_credentials))
        registry.every("retention", self.settings.retention_check_interval_ms, self.enforce_retention)

    def enforce_retention(self) -> None:
        for replica, topic in self.context.led_partitions("stream"):
            try:
                self.service.trim_if_due(replica, topic.retention_ms, topic.retention_bytes)
            except Exception:
                log.exception("retention check failed", extra={"group": replica.group_id})
