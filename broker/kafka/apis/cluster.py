"""DescribeCluster (60): the cluster id, the controller (the metadata group's leader) and the brokers by their
Kafka addresses."""
from __future__ import annotations

from raftbus.broker.kafka import codes
from raftbus.broker.kafka.apis.common import broker_list, endpoints

AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)


def handler(services):
    async def describe_cluster(request) -> dict:
        if getattr(request.body, "endpoint_type", 1) != 1:  # 2 = controllers: not a separate set here
            return {"error_code": codes.UNSUPPORTED_VERSION, "error_message": "only broker endpoints are listed",
                    "cluster_id": services.cluster_id, "brokers": []}
        controller = services.context.controller_id()
        return {"error_code": codes.NONE, "cluster_id": services.cluster_id,
                "controller_id": controller if controller in endpoints(services) else -1,
                "brokers": broker_list(services, "broker_id"),
                "cluster_authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN}

    return describe_cluster
