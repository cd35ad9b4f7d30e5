"""The Membership gRPC service: joining brokers, the metadata group's voters, partition reassignment and
broker decommissioning (proto/membership.proto)."""
from __future__ import annotations

from raftbus.client.wire import membership_pb2 as mpb
from raftbus.client.wire import membership_pb2_grpc as mpb_grpc

from raftbus.broker.grpc_server import unary


class MembershipServicer(mpb_grpc.MembershipServicer):
    def __init__(self, membership_service, decommissions):
        self.service = membership_service
        self.decommissions = decommissions

    @unary
    def JoinCluster(self, request, context):
        brokers, members = self.service.join(request.broker_id, request.address, request.raft_address,
                                             request.metrics_url)
        return mpb.JoinClusterResponse(
            brokers=[mpb.MemberAddress(broker_id=b, raft_address=a) for b, a in sorted(brokers.items())],
            voters=members.voters, learners=members.learners)

    @unary
    def MetadataMembers(self, request, context):
        members = self.service.members()
        return mpb.MetadataMembersResponse(voters=members.voters, learners=members.learners,
                                           config_index=members.config_index,
                                           controller_id=members.controller_id or 0,
                                           answering_broker_id=self.service.context.node_id)

    @unary
    def ReassignPartition(self, request, context):
        return reassignment_proto(self.service.reassign(request.topic, request.partition, list(request.replicas),
                                                        request.throttle_bytes_per_s))

    @unary
    def DescribeReassignment(self, request, context):
        return reassignment_proto(self.service.reassignment(request.topic, request.partition))

    @unary
    def DecommissionBroker(self, request, context):
        return decommission_proto(self.decommissions.start(request.broker_id))

    @unary
    def DescribeDecommission(self, request, context):
        return decommission_proto(self.decommissions.describe(request.broker_id))


def decommission_proto(view) -> mpb.DecommissionInfo:
    return mpb.DecommissionInfo(broker_id=view.broker_id, replicas_left=view.replicas_left,
                                reassignments_running=view.reassignments_running,
                                metadata_voter=view.metadata_voter, done=view.done)


def reassignment_proto(view) -> mpb.ReassignmentInfo:
    return mpb.ReassignmentInfo(topic=view.topic, partition=view.partition, replicas=view.replicas,
                                target=view.target, voters=view.voters, learners=view.learners,
                                lag_entries=view.lag_entries, done=view.done)


def membership_servicers(membership_service, decommissions) -> list:
    """(add_to_server, servicer) pairs of the Membership service."""
    return [(mpb_grpc.add_MembershipServicer_to_server, MembershipServicer(membership_service, decommissions))]
