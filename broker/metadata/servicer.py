"""The Admin gRPC service: topics, cluster metadata and status, broker stats."""
from __future__ import annotations

from raftbus.client.wire import raftbus_pb2 as pb
from raftbus.client.wire import raftbus_pb2_grpc as pb_grpc

from raftbus.broker import model
from raftbus.broker.grpc_server import unary
from raftbus.broker.queues.options import queue_options_of, queue_options_proto


def topic_proto(view) -> pb.TopicInfo:
    topic = view.topic
    return pb.TopicInfo(
        name=topic.name, topic_id=topic.topic_id, kind=topic.kind, ordering=topic.ordering or "",
        retention_ms=topic.retention_ms, retention_bytes=topic.retention_bytes, created_ms=topic.created_ms,
        partitions=[pb.PartitionInfo(partition=p.partition, leader_id=p.leader_id or 0, replicas=p.replicas,
                                     isr=p.isr, log_start_offset=p.log_start_offset,
                                     high_watermark=p.high_watermark) for p in view.partitions],
        queue=queue_options_proto(topic.queue),
        compaction=pb.Compaction(**topic.compaction.to_dict()) if topic.kind == "stream" else None,
    )


def compaction_options_of(request) -> dict:
    """The compaction options a CreateTopic or AlterTopic request sets (unset ones: defaults, or unchanged)."""
    options = {name: getattr(request, name) for name in model.COMPACTION_OPTIONS[1:] if request.HasField(name)}
    if request.cleanup_policy:
        options["cleanup_policy"] = request.cleanup_policy
    return options


def broker_proto(b, alive: bool) -> pb.BrokerInfo:
    return pb.BrokerInfo(broker_id=b.broker_id, address=b.address, raft_address=b.raft_address, alive=alive,
                         state=b.state, metrics_url=b.metrics_url, kafka_address=b.kafka_address)


def cluster_brokers(view) -> list[pb.BrokerInfo]:
    return [broker_proto(b, alive) for b, alive in view.brokers]


class AdminServicer(pb_grpc.AdminServicer):
    def __init__(self, admin_service):
        self.service = admin_service

    @unary
    def CreateTopic(self, request, context):
        view = self.service.create_topic(
            request.name, partitions=request.partitions if request.HasField("partitions") else None,
            replication_factor=request.replication_factor if request.HasField("replication_factor") else None,
            kind=request.kind, ordering=request.ordering,
            retention_ms=request.retention_ms if request.HasField("retention_ms") else None,
            retention_bytes=request.retention_bytes if request.HasField("retention_bytes") else None,
            compaction=compaction_options_of(request), **queue_options_of(request))
        return pb.CreateTopicResponse(topic=topic_proto(view))

    @unary
    def DeleteTopic(self, request, context):
        self.service.delete_topic(request.name)
        return pb.DeleteTopicResponse()

    @unary
    def ListTopics(self, request, context):
        return pb.ListTopicsResponse(topics=[topic_proto(v) for v in self.service.list_topics()])

    @unary
    def DescribeTopic(self, request, context):
        return topic_proto(self.service.describe_topic(request.name))

    @unary
    def AlterPartitions(self, request, context):
        return topic_proto(self.service.alter_partitions(request.name, request.partitions))

    @unary
    def SetBrokerState(self, request, context):
        return broker_proto(self.service.set_broker_state(request.broker_id, request.state), alive=True)

    @unary
    def AlterTopic(self, request, context):
        return topic_proto(self.service.alter_topic(
            request.name, retention_ms=request.retention_ms if request.HasField("retention_ms") else None,
            retention_bytes=request.retention_bytes if request.HasField("retention_bytes") else None,
            compaction=compaction_options_of(request), **queue_options_of(request)))

    @unary
    def GetMetadata(self, request, context):
        view = self.service.cluster(tuple(request.topics))
        return pb.MetadataResponse(brokers=cluster_brokers(view), controller_id=view.controller_id or 0,
                                   topics=[topic_proto(t) for t in view.topics],
                                   answering_broker_id=view.answering_broker_id)

    @unary
    def BrokerStats(self, request, context):
        return broker_stats_proto(self.service.broker_stats())

    @unary
    def ClusterStatus(self, request, context):
        view = self.service.cluster()
        return pb.ClusterStatusResponse(brokers=cluster_brokers(view), controller_id=view.controller_id or 0,
                                        topics=[topic_proto(t) for t in view.topics],
                                        answering_broker_id=view.answering_broker_id,
                                        cluster_id=self.service.cluster_id)


_STATS_FIELDS = ("broker_id", "rss_bytes", "cpu_user_s", "cpu_system_s", "uptime_s", "groups_hosted", "groups_led",
                 "durability_window_p50_ms", "durability_window_p99_ms", "durability_window_max_ms",
                 "group_commit_rounds", "pid", "stopped_groups", "disk_full", "damaged_stores",
                 "groups_quiesced", "compaction_passes", "compaction_bytes_scanned", "compaction_bytes_removed",
                 "compaction_busy_s", "compaction_key_map_peak_bytes", "heap_trims", "heap_trim_busy_s",
                 "heap_trim_longest_ms", "heap_trim_returned_bytes", "raft_log_bytes")


def broker_stats_proto(stats: dict) -> pb.BrokerStatsResponse:
    return pb.BrokerStatsResponse(**{name: stats[name] for name in _STATS_FIELDS if stats.get(name) is not None})


def admin_servicers(admin_service) -> list:
    """(add_to_server, servicer) pairs of the Admin service."""
    return [(pb_grpc.add_AdminServicer_to_server, AdminServicer(admin_service))]
