"""THE table: every gRPC method of the client port → the (resource, operation) checks a call must pass.

A call passes when the caller's ACLs allow every check (acl.py: admin on the cluster allows everything).
PUBLIC methods need no credentials (health checks); AUTHENTICATED ones need a known principal and no ACL
(cluster metadata: brokers, topics and their placement, which every producer and consumer reads to route).
A method missing here is refused (fail closed); a test checks every method of every service has a row.
Checks name the request field that carries the resource; a `*` field is repeated, a `?` field is checked only
when set (a Fetch with a consumer group).
"""
from __future__ import annotations

from typing import NamedTuple

from raftbus.broker.security.acl import ADMIN, CLUSTER, CONSUME, GROUP, PRODUCE, TOPIC


class Check(NamedTuple):
    resource_type: str  # topic, group or cluster
    field: str  # request field naming the resource ("" for the cluster); "name*" repeated, "name?" optional
    operation: str

    def resources(self, request) -> list[str]:
        """The resource names this check covers in `request`."""
        if self.resource_type == CLUSTER:
            return [""]
        name = self.field.rstrip("*?")
        value = getattr(request, name)
        if self.field.endswith("*"):
            return list(value)
        if self.field.endswith("?") and not value:
            return []
        return [value]


PUBLIC = None  # no credentials at all
AUTHENTICATED: tuple[Check, ...] = ()  # any known principal


def topic(field: str, operation: str) -> Check:
    return Check(TOPIC, field, operation)


def group(field: str, operation: str) -> Check:
    return Check(GROUP, field, operation)


def cluster(operation: str) -> Check:
    return Check(CLUSTER, "", operation)


_LOG, _ADMIN, _GROUPS = "/raftbus.v1.Log/", "/raftbus.v1.Admin/", "/raftbus.v1.Groups/"
_QUEUE, _SECURITY, _HEALTH = "/raftbus.v1.Queue/", "/raftbus.v1.Security/", "/grpc.health.v1.Health/"
_MEMBERSHIP = "/raftbus.v1.Membership/"

METHOD_CHECKS: dict[str, tuple[Check, ...] | None] = {
    # stream topics
    _LOG + "Produce": (topic("topic", PRODUCE),),
    _LOG + "ProduceStream": (topic("topic", PRODUCE),),  # every request of the stream
    _LOG + "Fetch": (topic("topic", CONSUME), group("group?", CONSUME)),
    _LOG + "FetchStream": (topic("topic", CONSUME), group("group?", CONSUME)),
    _LOG + "FetchMany": (topic("topic", CONSUME), group("group?", CONSUME)),
    _LOG + "ListOffsets": (topic("topic", CONSUME),),
    _LOG + "GetKey": (topic("topic", CONSUME),),  # compacted topics: key-value reads
    _LOG + "ListKeys": (topic("topic", CONSUME),),
    _LOG + "StartAt": (topic("topic", ADMIN),),  # restores: where an empty partition starts
    _LOG + "CheckpointPartition": (topic("topic", ADMIN),),  # topics verify
    _LOG + "ReplicaCheckpoint": (topic("topic", ADMIN),),
    _LOG + "StoreCopy": (cluster(ADMIN),),  # a whole partition image: brokers rebuilding a replica
    _LOG + "RebuildReplica": (cluster(ADMIN),),
    # topics and cluster metadata
    _ADMIN + "CreateTopic": (topic("name", ADMIN),),
    _ADMIN + "DeleteTopic": (topic("name", ADMIN),),
    _ADMIN + "AlterPartitions": (topic("name", ADMIN),),
    _ADMIN + "AlterTopic": (topic("name", ADMIN),),
    _ADMIN + "SetBrokerState": (cluster(ADMIN),),
    _ADMIN + "ListTopics": AUTHENTICATED,
    _ADMIN + "DescribeTopic": AUTHENTICATED,
    _ADMIN + "GetMetadata": AUTHENTICATED,
    _ADMIN + "ClusterStatus": AUTHENTICATED,
    _ADMIN + "BrokerStats": (cluster(ADMIN),),
    "/raftbus.v1.Integrity/MetadataDigest": (cluster(ADMIN),),  # cluster verify
    # consumer groups
    _GROUPS + "JoinGroup": (group("group", CONSUME), topic("topics*", CONSUME)),
    _GROUPS + "Heartbeat": (group("group", CONSUME),),
    _GROUPS + "SyncGroup": (group("group", CONSUME),),
    _GROUPS + "LeaveGroup": (group("group", CONSUME),),
    _GROUPS + "CommitOffset": (group("group", CONSUME), topic("topic", CONSUME)),
    _GROUPS + "FetchOffset": (group("group", CONSUME), topic("topic", CONSUME)),
    _GROUPS + "ResetOffset": (group("group", ADMIN), topic("topic", CONSUME)),
    _GROUPS + "RegisterGroup": (group("group", ADMIN), topic("topics*", CONSUME)),  # before a reset or a restore
    _GROUPS + "ListGroups": (cluster(ADMIN),),
    _GROUPS + "DescribeGroup": (group("group", CONSUME),),
    _GROUPS + "DeleteOffset": (group("group", ADMIN), topic("topic", CONSUME)),  # Kafka's DeleteGroups, OffsetDelete
    # queue topics: enqueue, cancel and reprioritize are the producer's; lease and settle the consumer's
    _QUEUE + "Enqueue": (topic("topic", PRODUCE),),
    _QUEUE + "Delete": (topic("topic", PRODUCE),),
    _QUEUE + "ChangePriority": (topic("topic", PRODUCE),),
    _QUEUE + "Lease": (topic("topic", CONSUME),),
    _QUEUE + "LeaseStream": (topic("topic", CONSUME),),
    _QUEUE + "Ack": (topic("topic", CONSUME),),
    _QUEUE + "Nack": (topic("topic", CONSUME),),
    _QUEUE + "Extend": (topic("topic", CONSUME),),
    _QUEUE + "Get": (topic("topic", CONSUME),),
    _QUEUE + "Peek": (topic("topic", CONSUME),),
    _QUEUE + "Stats": (topic("topic", CONSUME),),
    _QUEUE + "Scan": (topic("topic", CONSUME),),  # backups
    _QUEUE + "Redrive": (topic("topic", ADMIN),),
    # principals, tokens and ACLs
    _SECURITY + "CreateToken": (cluster(ADMIN),),
    _SECURITY + "ListTokens": (cluster(ADMIN),),
    _SECURITY + "RevokeTokens": (cluster(ADMIN),),
    _SECURITY + "GrantAcl": (cluster(ADMIN),),
    _SECURITY + "RevokeAcl": (cluster(ADMIN),),
    _SECURITY + "ListAcls": (cluster(ADMIN),),
    _SECURITY + "WhoAmI": AUTHENTICATED,
    # cluster membership and data movement
    _MEMBERSHIP + "JoinCluster": (cluster(ADMIN),),  # a broker joining (with the brokers' own credentials)
    _MEMBERSHIP + "MetadataMembers": AUTHENTICATED,
    _MEMBERSHIP + "ReassignPartition": (topic("topic", ADMIN),),
    _MEMBERSHIP + "DescribeReassignment": (topic("topic", ADMIN),),
    _MEMBERSHIP + "DecommissionBroker": (cluster(ADMIN),),
    _MEMBERSHIP + "DescribeDecommission": (cluster(ADMIN),),
    # load balancers and orchestrators probe health without credentials
    _HEALTH + "Check": PUBLIC,
    _HEALTH + "Watch": PUBLIC,
}


def operation_name(method: str) -> str:
    """`Log/Produce` for `/raftbus.v1.Log/Produce`: how denials name the call."""
    service, _, call = method.rpartition("/")
    return f"{service.rsplit('.', 1)[-1]}/{call}"
