"""Stream partitions as a part of the broker: the Log service and servicer, retention on the partitions led here (a
trim command when a partition's oldest batch or its size is past its topic's retention) and the compactor thread
(log/compactor.py) of the compacted ones."""
from __future__ import annotations

import logging
from pathlib import Path

from raftbus.broker.context import BrokerContext
from raftbus.broker.log.compactor import Compactor
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
        self.compactor = Compactor(context, settings, self.service)
        self._rebuild_dir = rebuild_dir
        self._peer_credentials = peer_credentials

    def register(self, registry) -> None:
        registry.serve(log_servicers(self.service, self._rebuild_dir, self._peer_credentials))
        registry.every("retention", self.settings.retention_check_interval_ms, self.enforce_retention)
        registry.thread("raftbus-compaction", self.compactor.run)

    def compaction_stats(self) -> dict:
        """The compactor's counters, for BrokerStats."""
        stats = self.compactor.stats
        with stats.lock:
            return {"compaction_passes": stats.passes, "compaction_bytes_scanned": stats.bytes_scanned,
                    "compaction_bytes_removed": stats.bytes_removed, "compaction_busy_s": stats.busy_s,
                    "compaction_key_map_peak_bytes": stats.key_map_peak_bytes}

    def enforce_retention(self) -> None:
        for replica, topic in self.context.led_partitions("stream"):
            try:
                if topic.compaction.deletes:  # cleanup policy delete or compact,delete
                    self.service.trim_if_due(replica, topic.retention_ms, topic.retention_bytes)
            except Exception:
                log.exception("retention check failed", extra={"group": replica.group_id})
