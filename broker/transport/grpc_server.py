"""gRPC servicers: translate proto ⇄ service calls and typed errors ⇄ status codes. No business rule lives here."""
from __future__ import annotations

import logging
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from raftbus.client import errors
from raftbus.client.wire import raftbus_pb2 as pb
from raftbus.client.wire import raftbus_pb2_grpc as pb_grpc

from .produce_stream import ProducePipeline
from .queue_options import queue_options_of, queue_options_proto

log = logging.getLogger(__name__)


def _abort(context: grpc.ServicerContext, error: errors.RaftbusError):
    context.set_trailing_metadata(errors.trailing_metadata(error))
    context.abort(errors.status_for(error), error.message)


def _error_proto(error: errors.RaftbusError) -> pb.Error:
    return pb.Error(code=error.code, message=error.message, leader_id=error.leader_id or 0,
                    leader_address=error.leader_address or "")


def _typed(exc: Exception) -> errors.RaftbusError:
    if isinstance(exc, errors.RaftbusError):
        return exc
    log.exception("unexpected error while serving a request", exc_info=exc)
    return errors.InternalError(f"{type(exc).__name__}: {exc}")


def unary(method):
    """Run a servicer method, turning any error into a status + stable code (never a crash)."""

    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except Exception as exc:  # every failure gets a typed answer
            _abort(context, _typed(exc))

    wrapper.__name__ = method.__name__
    return wrapper


def topic_proto(view) -> pb.TopicInfo:
    topic = view.topic
    return pb.TopicInfo(
        name=topic.name, topic_id=topic.topic_id, kind=topic.kind, ordering=topic.ordering or "",
        retention_ms=topic.retention_ms, retention_bytes=topic.retention_bytes, created_ms=topic.created_ms,
        partitions=[pb.PartitionInfo(partition=p.partition, leader_id=p.leader_id or 0, replicas=p.replicas,
                                     isr=p.isr, log_start_offset=p.log_start_offset,
                                     high_watermark=p.high_watermark) for p in view.partitions],
        queue=queue_options_proto(topic.queue),
    )


def cluster_brokers(view) -> list[pb.BrokerInfo]:
    return [pb.BrokerInfo(broker_id=b.broker_id, address=b.address, raft_address=b.raft_address, alive=alive,
                          metrics_url=b.metrics_url)
            for b, alive in view.brokers]


class LogServicer(pb_grpc.LogServicer):
    def __init__(self, log_service):
        self.service = log_service

    def _produce(self, request) -> pb.ProduceResponse:
        result = self.service.produce(
            request.topic, request.partition, producer_id=request.producer_id,
            base_sequence=request.base_sequence, record_count=request.record_count,
            max_timestamp_ms=request.max_timestamp_ms, records=request.records)
        return pb.ProduceResponse(request_id=request.request_id, topic=request.topic, partition=request.partition,
                                  base_offset=result.base_offset, duplicate=result.duplicate,
                                  append_time_ms=result.append_time_ms)

    @unary
    def Produce(self, request, context):
        return self._produce(request)

    def _submit_produce(self, request):
        return self.service.submit_produce(
            request.topic, request.partition, producer_id=request.producer_id,
            base_sequence=request.base_sequence, record_count=request.record_count,
            max_timestamp_ms=request.max_timestamp_ms, records=request.records)

    def ProduceStream(self, request_iterator, context):
        """Pipelined: each request is proposed on arrival, in order; answers stream back as batches commit."""
        settings = self.service.settings
        pipeline = ProducePipeline(self._submit_produce, in_flight_max=settings.produce_stream_in_flight_max,
                                   timeout_s=settings.produce_timeout_ms / 1000, typed=_typed)
        yield from pipeline.run(request_iterator, context.is_active)

    def _fetch(self, request, offset: int) -> pb.FetchResponse:
        member = (request.group, request.member_id, request.generation) if request.group else None
        result = self.service.fetch(request.topic, request.partition, offset, max_bytes=request.max_bytes or 1 << 20,
                                    max_wait_ms=request.max_wait_ms, member=member)
        return pb.FetchResponse(topic=request.topic, partition=request.partition,
                                high_watermark=result.high_watermark, log_start_offset=result.log_start_offset,
                                batches=result.batches)

    @unary
    def Fetch(self, request, context):
        return self._fetch(request, request.offset)

    def FetchStream(self, request, context):
        """Server-streaming long-poll: one answer per batch range, following the log until the client cancels."""
        offset = request.offset
        while context.is_active():
            try:
                response = self._fetch(request, offset)
            except Exception as exc:
                yield pb.FetchResponse(topic=request.topic, partition=request.partition,
                                       error=_error_proto(_typed(exc)))
                return
            if response.batches:
                offset = _next_offset(response.batches, offset)
                yield response
            elif request.max_wait_ms <= 0:
                yield response
                return

    @unary
    def ListOffsets(self, request, context):
        offset, log_start, high_watermark = self.service.list_offsets(request.topic, request.partition,
                                                                      request.timestamp_ms)
        return pb.ListOffsetsResponse(offset=offset, log_start_offset=log_start, high_watermark=high_watermark)


def _next_offset(batches: bytes, offset: int) -> int:
    """The offset after the last stored batch in a fetch answer (reads only batch headers)."""
    import struct

    header = struct.Struct(">qIqqI")
    view = memoryview(batches)
    position, last = 0, offset
    while position + header.size <= len(view):
        base, count, _, _, blob_len = header.unpack_from(view, position)
        last = base + count
        position += header.size + blob_len
    return max(last, offset)


class AdminServicer(pb_grpc.AdminServicer):
    def __init__(self, admin_service):
        self.service = admin_service

    @unary
    def CreateTopic(self, request, context):
        view = self.service.create_topic(
            request.name, partitions=request.partitions, replication_factor=request.replication_factor,
            kind=request.kind, ordering=request.ordering,
            retention_ms=request.retention_ms if request.HasField("retention_ms") else None,
            retention_bytes=request.retention_bytes if request.HasField("retention_bytes") else None,
            **queue_options_of(request))
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
                                        answering_broker_id=view.answering_broker_id)


_STATS_FIELDS = ("broker_id", "rss_bytes", "cpu_user_s", "cpu_system_s", "uptime_s", "groups_hosted", "groups_led",
                 "durability_window_p50_ms", "durability_window_p99_ms", "durability_window_max_ms",
                 "group_commit_rounds", "pid")


def broker_stats_proto(stats: dict) -> pb.BrokerStatsResponse:
    return pb.BrokerStatsResponse(**{name: stats[name] for name in _STATS_FIELDS if stats.get(name) is not None})


def build_server(address: str, servicers, *, workers_max: int, message_bytes_max: int, interceptors=()):
    """A gRPC server with the given servicers and the standard health service; returns (server, health, port).

    `servicers` is a list of (add_XServicer_to_server, servicer) pairs, one per raftbus service.
    """
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers_max, thread_name_prefix="raftbus-grpc"),
        options=[("grpc.max_receive_message_length", message_bytes_max),
                 ("grpc.max_send_message_length", message_bytes_max),
                 ("grpc.so_reuseport", 0)],
        interceptors=list(interceptors),
    )
    for add_to_server, servicer in servicers:
        add_to_server(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    health_servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    return server, health_servicer, port


def core_servicers(log_service, admin_service) -> list:
    """The Log and Admin services every broker serves."""
    return [(pb_grpc.add_LogServicer_to_server, LogServicer(log_service)),
            (pb_grpc.add_AdminServicer_to_server, AdminServicer(admin_service))]
