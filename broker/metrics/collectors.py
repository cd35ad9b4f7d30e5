"""Collectors that read a broker's live state at scrape time (Prometheus calls `collect()` per scrape).

Partition data (offsets, ISR, queue counts, group lag) is reported by the partition's leader only, so a sum over
brokers counts each partition once; `raftbus_partition_leader` and the latency histograms come from every replica.
"""
from __future__ import annotations

import logging
import shutil

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

log = logging.getLogger(__name__)

_PARTITION = ["topic", "partition"]
_QUEUE_STATES = ("ready", "delayed", "in_flight", "dead")
_NO_LIMIT_MS = 1 << 62


def histogram_family(name: str, text: str, rows) -> HistogramMetricFamily:
    """rows: (label values, HistogramSnapshot) → one Prometheus histogram family."""
    family = HistogramMetricFamily(name, text, labels=_PARTITION)
    for labels, snap in rows:
        buckets = [("+Inf" if bound == float("inf") else repr(bound), count) for bound, count in snap.buckets]
        family.add_metric(labels, buckets, snap.sum_s)
    return family


class PartitionCollector:
    """Per partition replica hosted by the broker: role, offsets, ISR, queue counts, latencies."""

    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        g = {name: GaugeMetricFamily(name, text, labels=_PARTITION) for name, text in (
            ("raftbus_partition_leader", "1 where this broker leads the partition, 0 where it follows"),
            ("raftbus_partition_replicas", "Replicas the partition is placed on (leader only)"),
            ("raftbus_partition_in_sync_replicas", "In-sync replicas, the leader included (leader only)"),
            ("raftbus_partition_under_replicated", "1 when fewer replicas are in sync than placed (leader only)"),
            ("raftbus_partition_high_watermark", "Offset the next record will get (stream, leader only)"),
            ("raftbus_partition_log_start_offset", "First retained offset (stream, leader only)"),
            ("raftbus_partition_size_bytes", "Retained stored batch bytes (stream, leader only)"),
            ("raftbus_queue_oldest_ready_age_seconds", "Age of the oldest ready message (queue, leader only)"),
        )}
        queue = GaugeMetricFamily("raftbus_queue_messages", "Messages by state (queue, leader only)",
                                  labels=[*_PARTITION, "state"])
        commit_rows, fsync_rows = [], []
        topics = {t.topic_id: t for t in self.broker.metadata_sm.topics().values()}
        for replica in list(self.broker.context.partitions.values()):
            topic = topics.get(replica.topic_id)
            if topic is None:
                continue
            labels = [replica.topic, str(replica.partition)]
            group = replica.group
            commit_rows.append((labels, group.commit_latency.snapshot()))
            fsync_rows.append((labels, group.fsync_latency.snapshot()))
            try:
                self._replica(g, queue, replica, topic, labels)
            except Exception:  # a replica closing under the scrape: skip it this time
                log.debug("metrics of %s skipped", replica.group_id, exc_info=True)
        yield from g.values()
        yield queue
        yield histogram_family("raftbus_partition_commit_latency_seconds",
                               "Time from proposing a command to its commit and apply on this leader", commit_rows)
        yield histogram_family("raftbus_partition_fsync_latency_seconds",
                               "Duration of one group-commit sync of this replica (store, then Raft journal)",
                               fsync_rows)

    def _replica(self, g, queue, replica, topic, labels) -> None:
        group = replica.group
        leading = group.is_leader
        g["raftbus_partition_leader"].add_metric(labels, 1 if leading else 0)
        if not leading:
            return
        placement = topic.partitions[replica.partition]
        isr = len(group.in_sync_replicas(self.broker.node_id))
        g["raftbus_partition_replicas"].add_metric(labels, len(placement.replicas))
        g["raftbus_partition_in_sync_replicas"].add_metric(labels, isr)
        g["raftbus_partition_under_replicated"].add_metric(labels, 1 if isr < len(placement.replicas) else 0)
        sm = replica.state_machine
        if topic.kind == "queue":
            for state, count in zip(_QUEUE_STATES, sm.counts()):
                queue.add_metric([*labels, state], count)
            stats = sm.stats(0, self.broker.settings.queues.queue_stats_scan_max)
            if stats.oldest_ready_enqueued_ms is not None:
                age_ms = max(0, self.broker.clock.now_ms() - stats.oldest_ready_enqueued_ms)
                g["raftbus_queue_oldest_ready_age_seconds"].add_metric(labels, age_ms / 1000)
            return
        log_start, high_watermark = sm.offsets()
        g["raftbus_partition_high_watermark"].add_metric(labels, high_watermark)
        g["raftbus_partition_log_start_offset"].add_metric(labels, log_start)
        g["raftbus_partition_size_bytes"].add_metric(labels, sm.size_bytes())


class GroupLagCollector:
    """Per consumer group and stream partition led here: lag in records and in seconds (age of the oldest
    unconsumed record), for every group with a committed offset on the partition."""

    def __init__(self, broker, groups_per_partition_max: int):
        self.broker = broker
        self.groups_per_partition_max = groups_per_partition_max

    def collect(self):
        labels = ["group", *_PARTITION]
        records = GaugeMetricFamily("raftbus_group_lag_records", "Records from the committed offset to the end",
                                    labels=labels)
        seconds = GaugeMetricFamily("raftbus_group_lag_seconds", "Age of the oldest record the group has not "
                                    "committed past (0 when caught up)", labels=labels)
        for replica in led_stream_replicas(self.broker):
            try:
                self._partition(records, seconds, replica)
            except Exception:
                log.debug("lag metrics of %s skipped", replica.group_id, exc_info=True)
        yield records
        yield seconds

    def _partition(self, records, seconds, replica) -> None:
        groups = replica.state_machine.offsets_committed_before(_NO_LIMIT_MS)[:self.groups_per_partition_max]
        for name in groups:
            lag = self.broker.features.groups.offsets.fetch(name, replica.topic, replica.partition)
            if lag.lag_records < 0:
                continue
            labels = [name, replica.topic, str(replica.partition)]
            records.add_metric(labels, lag.lag_records)
            seconds.add_metric(labels, lag.lag_ms / 1000)


class BrokerCollector:
    """Per broker: Raft groups hosted and led, controller, peers, snapshot bytes, disk space of the data dir."""

    def __init__(self, broker, role_changes):
        self.broker = broker
        self.role_changes = role_changes  # RoleChanges

    def collect(self):
        b = self.broker
        groups = list(b.loop.groups.values())
        yield _gauge("raftbus_broker_id", "This broker's node id", b.node_id)
        registered = b.metadata_sm.brokers().get(b.node_id)
        yield _gauge("raftbus_broker_draining", "1 while this broker is draining (handing its leaderships away)",
                     int(registered is not None and registered.draining))
        yield _gauge("raftbus_raft_groups_hosted", "Raft groups on this broker (metadata + replicas)", len(groups))
        yield _gauge("raftbus_raft_groups_led", "Raft groups this broker leads", sum(1 for x in groups if x.is_leader))
        quiescence = b.loop.quiescence
        yield _gauge("raftbus_raft_groups_quiesced", "Raft groups hosted here that are quiesced (idle: not ticked, no "
                     "heartbeats)", len(quiescence.quiesced) if quiescence is not None else 0)
        yield _gauge("raftbus_controller", "1 when this broker leads the metadata group",
                     int(b.metadata_group.is_leader))
        yield _gauge("raftbus_controller_known", "1 when this broker knows a metadata group leader",
                     int(b.metadata_group.leader_id is not None))
        yield _gauge("raftbus_peers_connected", "Brokers this broker has a Raft connection to",
                     len(b.hub.connected_peers()))
        yield _gauge("raftbus_raft_snapshot_bytes", "Bytes of the Raft snapshot files of the groups hosted here",
                     sum(_file_bytes(x.data_dir / "raft.snapshot") for x in groups))
        yield _gauge("raftbus_raft_log_bytes", "Bytes of Raft log held in memory by the groups hosted here",
                     sum(x.log_bytes for x in groups))
        faults = b.faults.stats()
        yield _gauge("raftbus_raft_groups_stopped", "Raft groups on this broker that crash-stopped (storage or fsync "
                     "failure, a damaged journal)", len(faults["stopped_groups"]))
        yield _gauge("raftbus_stores_damaged", "Stores on this broker that failed their checksum when opened and are "
                     "not rebuilt yet", len(faults["damaged_stores"]))
        usage = shutil.disk_usage(b.data_dir)
        yield _gauge("raftbus_disk_free_bytes", "Free bytes on the file system of the data dir", usage.free)
        yield _gauge("raftbus_disk_total_bytes", "Size of the file system of the data dir", usage.total)
        open_now = GaugeMetricFamily("raftbus_storage_replicas_open", "Partition stores and journals with their files "
                                     "open (the others are parked: closed while idle, see storage_replicas_open_max)",
                                     labels=["kind"])
        parked = CounterMetricFamily("raftbus_storage_parked", "Partition stores and journals parked (files closed "
                                     "while idle) because the open ones reached storage_replicas_open_max",
                                     labels=["kind"])
        reopened = CounterMetricFamily("raftbus_storage_reopened", "Parked partition stores and journals opened again "
                                       "by a read or write", labels=["kind"])
        for budget in (b.open_stores, b.open_journals):
            open_now.add_metric([budget.kind], budget.open_count)
            parked.add_metric([budget.kind], budget.parked_total)
            reopened.add_metric([budget.kind], budget.reopened_total)
        yield open_now
        yield parked
        yield reopened
        yield _gauge("raftbus_storage_replicas_open_max", "The bound on open partition stores, and on open journals "
                     "(storage_replicas_open_max, or derived from the file descriptor limit)", b.open_stores.limit)
        yield CounterMetricFamily("raftbus_raft_messages_dropped", "Raft messages for groups not hosted here (not "
                                  "opened yet, or deleted), dropped: their senders send again",
                                  value=b.loop.dropped_messages)
        early = CounterMetricFamily("raftbus_raft_early_votes", "Vote requests for replicas not opened here yet: kept "
                                    "(raft_early_votes_keep_ms), and delivered when the replica opened",
                                    labels=["outcome"])
        votes = b.loop.early_votes
        early.add_metric(["kept"], votes.kept_total if votes is not None else 0)
        early.add_metric(["delivered"], votes.delivered_total if votes is not None else 0)
        yield early
        changes = CounterMetricFamily("raftbus_raft_role_changes", "Raft role changes of the groups hosted here, by "
                                      "the role entered (candidate = an election started here)", labels=["role"])
        for role, count in self.role_changes.counts().items():
            changes.add_metric([role], count)
        yield changes


def led_stream_replicas(broker):
    """The stream partition replicas this broker leads now."""
    topics = {t.topic_id: t for t in broker.metadata_sm.topics().values()}
    for replica in list(broker.context.partitions.values()):
        topic = topics.get(replica.topic_id)
        if topic is not None and topic.kind == "stream" and replica.group.is_leader:
            yield replica


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)


def _file_bytes(path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
