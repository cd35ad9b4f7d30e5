"""The Log gRPC service: produce (unary and pipelined stream), fetch (unary and long-poll stream), offsets."""
from __future__ import annotations

import functools
from pathlib import Path

import grpc

from raftbus.client.credentials import Credentials
from raftbus.client.errors import error_from_rpc
from raftbus.client.router import grpc_connect
from raftbus.client.wire import raftbus_pb2 as pb
from raftbus.client.wire import raftbus_pb2_grpc as pb_grpc

from raftbus.broker.context import wait_result
from raftbus.broker.grpc_server import _abort, _error_proto, _typed, unary
from raftbus.broker.log.produce_stream import ProducePipeline
from raftbus.broker.log.rebuild import RebuildService
from raftbus.broker.log.verify import VerifyService


class LogServicer(pb_grpc.LogServicer):
    def __init__(self, log_service, verify_service: VerifyService, rebuild_service: RebuildService,
                 rebuild_dir: Path):
        self.service = log_service
        self.verify = verify_service
        self.rebuild = rebuild_service
        self.rebuild_dir = rebuild_dir  # where a replica's store copy is written before it is installed

    def _produce(self, request) -> pb.ProduceResponse:
        result = wait_result(self._submit_produce(request), self.service.settings.produce_timeout_ms / 1000)
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
            max_timestamp_ms=request.max_timestamp_ms, records=request.records,
            expected_revision=request.expected_revision if request.HasField("expected_revision") else None)

    @unary
    def GetKey(self, request, context):
        found, revision, record, high_watermark = self.service.get_key(request.topic, request.partition, request.key)
        if not found:
            return pb.GetKeyResponse(found=False, revision=revision, high_watermark=high_watermark)
        return pb.GetKeyResponse(found=True, revision=revision, value=record.value, timestamp_ms=record.timestamp_ms,
                                 headers=[pb.Header(name=n, value=v) for n, v in record.headers],
                                 high_watermark=high_watermark)

    @unary
    def ListKeys(self, request, context):
        start_after = request.start_after if request.HasField("start_after") else None
        keys, more, high_watermark = self.service.list_keys(request.topic, request.partition, request.prefix,
                                                            start_after, request.limit)
        return pb.ListKeysResponse(keys=[pb.KeyRevision(key=k, revision=r) for k, r in keys], more=more,
                                   high_watermark=high_watermark)

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

    @unary
    def FetchMany(self, request, context):
        member = (request.group, request.member_id, request.generation) if request.group else None
        answers = self.service.fetch_many(request.topic, [(p.partition, p.offset, p.max_bytes)
                                                          for p in request.partitions],
                                          max_bytes=request.max_bytes or 1 << 20, max_wait_ms=request.max_wait_ms,
                                          member=member)
        return pb.FetchManyResponse(partitions=[
            pb.FetchResponse(topic=request.topic, partition=a.partition, high_watermark=a.high_watermark,
                             log_start_offset=a.log_start_offset, batches=a.batches,
                             error=_error_proto(a.error) if a.error is not None else None)
            for a in answers])

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
    def StartAt(self, request, context):
        offset = self.service.start_at(request.topic, request.partition, request.offset)
        return pb.ListOffsetsResponse(offset=offset, log_start_offset=offset, high_watermark=offset)

    @unary
    def ListOffsets(self, request, context):
        offset, log_start, high_watermark = self.service.list_offsets(request.topic, request.partition,
                                                                      request.timestamp_ms)
        return pb.ListOffsetsResponse(offset=offset, log_start_offset=log_start, high_watermark=high_watermark)


    @unary
    def CheckpointPartition(self, request, context):
        index, replicas = self.verify.checkpoint(request.topic, request.partition)
        return pb.CheckpointPartitionResponse(index=index, replicas=[pb.ReplicaRef(broker_id=b, address=a)
                                                                     for b, a in replicas])

    @unary
    def ReplicaCheckpoint(self, request, context):
        report = self.verify.replica_report(request.topic, request.partition, request.index, request.max_wait_ms)
        checkpoint = report.checkpoint
        fields = {} if checkpoint is None else {
            "index": checkpoint.index, "log_start_offset": checkpoint.log_start_offset,
            "high_watermark": checkpoint.high_watermark, "digest_tracked": checkpoint.digest is not None,
            "digest": checkpoint.digest or 0}
        return pb.ReplicaCheckpointResponse(broker_id=report.broker_id, applied_index=report.applied_index,
                                            store_checked=report.store_consistent is not None,
                                            store_consistent=bool(report.store_consistent), **fields)


    def StoreCopy(self, request, context):
        """Server-streaming: the leader's store image in chunks (see broker/log/rebuild.py)."""
        try:
            for index, chunk in self.rebuild.store_copy(request.topic, request.partition):
                yield pb.StoreChunk(data=chunk, applied_index=index)
        except Exception as exc:  # a typed status, never a crash
            _abort(context, _typed(exc))

    @unary
    def RebuildReplica(self, request, context):
        leader, index, size = self.rebuild.rebuild(request.topic, request.partition, self.rebuild_dir)
        return pb.RebuildReplicaResponse(broker_id=self.service.context.node_id, source_broker_id=leader,
                                         applied_index=index, image_bytes=size)


def copy_from_leader(topic: str, partition: int, address: str, credentials: Credentials = Credentials()):
    """The leader's store image for (topic, partition), as (applied_index, chunk) pairs; `credentials` are this
    broker's own toward other brokers' client ports (TLS, token) when security is on."""
    conn = grpc_connect(address, credentials)
    try:
        for chunk in conn.log.StoreCopy(pb.StoreCopyRequest(topic=topic, partition=partition), timeout=600):
            yield chunk.applied_index, chunk.data
    except grpc.RpcError as exc:
        raise error_from_rpc(exc) from None
    finally:
        conn.close()


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


def log_servicers(log_service, rebuild_dir: Path, peer_credentials: dict | None = None) -> list:
    """(add_to_server, servicer) pairs of the Log service; `peer_credentials` (the SDK's tls_ca, tls_cert, tls_key,
    token) are how this broker reaches a leader's client port to copy its store (rebuild) into `rebuild_dir`."""
    context = log_service.context
    credentials = Credentials.of(**(peer_credentials or {}))
    copy = functools.partial(copy_from_leader, credentials=credentials)
    verify = VerifyService(context, log_service.settings.fetch_wait_max_ms)
    servicer = LogServicer(log_service, verify, RebuildService(context, copy), rebuild_dir)
    return [(pb_grpc.add_LogServicer_to_server, servicer)]
