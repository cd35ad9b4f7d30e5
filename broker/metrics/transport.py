"""Metrics of the Raft transport and of what leaders stream to followers (read at scrape time).

The hub's counters (`RaftHub.stats`) are the broker's since it started; the transfer counters
(`raftbus.broker.raft.transfer.Replication.stats`) are summed over the groups hosted now, so a group that is
removed takes its counts with it.
"""
from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

HUB_COUNTERS = {
    "bytes_out": "Bytes written to Raft peers",
    "bytes_in": "Bytes read from Raft peers",
    "send_buffer_overflows": "Raft connections closed because their send buffer passed raft_send_buffer_bytes_max",
    "connections_lost": "Authenticated Raft connections lost (closed by the peer, or a read or write failed)",
}
TRANSFER_COUNTERS = {
    "entries_bytes_sent": "Bytes of log entries sent to followers by the groups led here",
    "flow_control_waits": "Times a group held entries or snapshot chunks back: its window or the peer's share was full",
    "snapshot_bytes_sent": "Bytes of snapshot chunks sent to followers",
    "snapshots_sent": "Snapshots a follower installed from this broker",
    "snapshot_resumes": "Snapshot transfers sent again from the follower's offset (a gap, a restart, a timeout)",
    "snapshots_received": "Snapshots received and installed here",
    "snapshot_chunks_refused": "Snapshot chunks refused here (malformed, or a digest that did not match)",
}


class RaftTransportCollector:
    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        hub = self.broker.hub.stats()
        for key, text in HUB_COUNTERS.items():
            yield CounterMetricFamily(f"raftbus_raft_transport_{key}", text, value=hub.get(key, 0))
        yield GaugeMetricFamily("raftbus_raft_transport_peers_gcm_tagged",
                                "Connected Raft peers this broker sends GCM-tagged frames (they offered them)",
                                value=hub.get("peers_gcm_tagged", 0))
        totals = dict.fromkeys(TRANSFER_COUNTERS, 0)
        for group in list(self.broker.loop.groups.values()):
            stats = getattr(getattr(group, "replication", None), "stats", {})
            for key in totals:
                totals[key] += stats.get(key, 0)
        for key, text in TRANSFER_COUNTERS.items():
            yield CounterMetricFamily(f"raftbus_raft_{key}", text, value=totals[key])
