"""The Groups gRPC servicer: translates proto ⇄ GroupService / OffsetService calls. No business rule lives here."""
from __future__ import annotations

from raftbus.client.wire import groups_pb2 as gpb
from raftbus.client.wire import groups_pb2_grpc as gpb_grpc

from raftbus.broker.grpc_server import unary


def partitions_proto(tps) -> list[gpb.TopicPartition]:
    return [gpb.TopicPartition(topic=t, partition=p) for t, p in tps]


def group_proto(group) -> gpb.GroupInfo:
    owned = group.owned_by_member()
    members = [gpb.GroupMember(member_id=m.member_id, client_id=m.client_id, topics=m.topics,
                               session_timeout_ms=m.session_timeout_ms, rebalance_timeout_ms=m.rebalance_timeout_ms,
                               joined_ms=m.joined_ms, owned=partitions_proto(owned[m.member_id]),
                               target=partitions_proto(m.target))
               for _, m in sorted(group.members.items())]
    classic = group.classic
    return gpb.GroupInfo(name=group.name, generation=group.generation, state=group.state, members=members,
                         topics=group.topics, created_ms=group.created_ms, changed_ms=group.changed_ms,
                         protocol=group.protocol, protocol_type=classic.protocol_type if classic else "",
                         assignor=classic.protocol_name if classic else "")


def offset_proto(lag) -> gpb.PartitionOffset:
    committed = lag.committed
    fields = {} if committed is None else {
        "generation": committed.generation, "commit_time_ms": committed.commit_time_ms,
        "metadata": committed.metadata}
    return gpb.PartitionOffset(topic=lag.topic, partition=lag.partition,
                               committed_offset=-1 if committed is None else committed.offset,
                               log_start_offset=lag.log_start_offset, high_watermark=lag.high_watermark,
                               lag_records=lag.lag_records, lag_ms=lag.lag_ms, **fields)


class GroupsServicer(gpb_grpc.GroupsServicer):
    def __init__(self, group_service, offset_service):
        self.groups = group_service
        self.offsets = offset_service

    @unary
    def JoinGroup(self, request, context):
        answer = self.groups.join(request.group, member_id=request.member_id, client_id=request.client_id,
                                  topics=list(request.topics), session_timeout_ms=request.session_timeout_ms,
                                  rebalance_timeout_ms=request.rebalance_timeout_ms)
        return gpb.JoinGroupResponse(member_id=answer.member_id, generation=answer.generation,
                                     session_timeout_ms=answer.session_timeout_ms,
                                     rebalance_timeout_ms=answer.rebalance_timeout_ms,
                                     heartbeat_interval_ms=answer.heartbeat_interval_ms)

    @unary
    def Heartbeat(self, request, context):
        generation, rebalance = self.groups.heartbeat(request.group, request.member_id, request.generation,
                                                      request.max_wait_ms)
        return gpb.HeartbeatResponse(generation=generation, rebalance=rebalance)

    @unary
    def SyncGroup(self, request, context):
        view = self.groups.sync(request.group, request.member_id, request.generation,
                                [(tp.topic, tp.partition) for tp in request.released])
        return gpb.SyncGroupResponse(generation=view.generation, owned=partitions_proto(view.owned),
                                     revoking=partitions_proto(view.revoking), pending=partitions_proto(view.pending))

    @unary
    def LeaveGroup(self, request, context):
        self.groups.leave(request.group, request.member_id)
        return gpb.LeaveGroupResponse()

    @unary
    def CommitOffset(self, request, context):
        stored = self.offsets.commit(request.group, member_id=request.member_id, generation=request.generation,
                                     topic=request.topic, partition=request.partition, offset=request.offset,
                                     metadata=request.metadata, reset=request.reset)
        return gpb.CommitOffsetResponse(offset=stored.offset, commit_time_ms=stored.commit_time_ms)

    @unary
    def ResetOffset(self, request, context):
        stored = self.offsets.reset(request.group, topic=request.topic, partition=request.partition,
                                    offset=request.offset)
        return gpb.CommitOffsetResponse(offset=stored.offset, commit_time_ms=stored.commit_time_ms)

    @unary
    def RegisterGroup(self, request, context):
        return group_proto(self.groups.register(request.group, list(request.topics)))

    @unary
    def FetchOffset(self, request, context):
        member = (request.member_id, request.generation) if request.member_id else None
        return offset_proto(self.offsets.fetch(request.group, request.topic, request.partition,
                                               consistent=request.consistent, member=member))

    @unary
    def ListGroups(self, request, context):
        return gpb.ListGroupsResponse(groups=[group_proto(g) for g in self.groups.list_groups()])

    @unary
    def DescribeGroup(self, request, context):
        return group_proto(self.groups.describe_group(request.group))

    @unary
    def DeleteOffset(self, request, context):
        return gpb.DeleteOffsetResponse(deleted=self.offsets.delete(request.group, topic=request.topic,
                                                                    partition=request.partition))


def group_servicers(group_service, offset_service) -> list:
    """The Groups service, as (add_to_server, servicer) pairs for build_server."""
    return [(gpb_grpc.add_GroupsServicer_to_server, GroupsServicer(group_service, offset_service))]
