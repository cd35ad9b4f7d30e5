"""Metadata (3): brokers by their Kafka addresses, the controller, and each topic's partitions with their current
Raft leader, in-sync replicas and replicas, so Kafka clients route to partition leaders themselves."""
from __future__ import annotations

from raftbus.broker.kafka import codes
from raftbus.broker.kafka.apis.common import broker_list, endpoints, leader_and_isr, topic_uuid
from raftbus.broker.kafka.session import DESCRIBE, TOPIC

AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)


def handler(services):
    async def metadata(request) -> dict:
        body = request.body
        topics = services.context.metadata_sm.topics()
        by_id = None
        if body.topics is None or (request.version == 0 and not body.topics):
            wanted, listed = sorted(topics), True
        else:  # by name, or (v10+, Kafka's consumer protocol) by topic id
            wanted, listed = [], False
            for t in body.topics:
                if t.name is not None:
                    wanted.append(t.name)
                elif getattr(t, "topic_id", None) is not None:
                    by_id = by_id if by_id is not None else {topic_uuid(v): n for n, v in topics.items()}
                    wanted.append(by_id.get(t.topic_id, t.topic_id))
        known = endpoints(services)
        alive = services.context.alive_brokers()
        answers = []
        for name in wanted:
            if not isinstance(name, str):  # a topic id no topic has
                answers.append({"name": None, "topic_id": name, "error_code": codes.UNKNOWN_TOPIC_ID,
                                "partitions": []})
                continue
            denied = request.session.denied(TOPIC, name, DESCRIBE)
            if denied:
                if not listed:  # a listing leaves out what the caller may not see
                    answers.append({"name": name, "error_code": denied, "partitions": []})
                continue
            topic = topics.get(name)
            answers.append(_topic(services, name, topic, known, alive))
        controller = services.context.controller_id()
        return {"brokers": broker_list(services), "cluster_id": services.cluster_id,
                "controller_id": controller if controller in known else -1, "topics": answers}

    return metadata


def _topic(services, name: str, topic, known, alive) -> dict:
    if topic is None:
        return {"name": name, "error_code": codes.UNKNOWN_TOPIC_OR_PARTITION, "partitions": []}
    if topic.kind != "stream":  # queue topics: the Kafka port does not serve them (the error names the kind)
        return {"name": name, "error_code": codes.INVALID_REQUEST, "partitions": []}
    partitions = []
    for placement in topic.partitions:
        leader, isr = leader_and_isr(services, topic, placement.partition)
        replicas = list(placement.replicas)
        error = codes.NONE if leader in known else codes.LEADER_NOT_AVAILABLE
        partitions.append({
            "error_code": error, "partition_index": placement.partition,
            "leader_id": leader if leader in known else -1, "leader_epoch": -1,
            "replica_nodes": replicas, "isr_nodes": [b for b in isr if b in replicas] or ([leader] if leader else []),
            "offline_replicas": [b for b in replicas if b not in alive],
        })
    return {"name": name, "error_code": codes.NONE, "partitions": partitions, "topic_id": topic_uuid(topic),
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN}
