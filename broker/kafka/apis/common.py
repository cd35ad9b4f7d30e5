"""What several Kafka APIs share: broker endpoints, partition leaders and the NOT_LEADER_OR_FOLLOWER hint."""
from __future__ import annotations

import uuid

from raftbus.client import errors

from raftbus.broker.context import partition_group_id
from raftbus.broker.kafka import codes


def endpoints(services) -> dict[int, tuple[str, int]]:
    """broker id -> (host, port) of its Kafka port, for every registered broker that has one."""
    found = {}
    for broker_id, address in services.kafka_addresses().items():
        host, sep, port = address.rpartition(":")
        if sep and port.isdigit():
            found[broker_id] = (host.strip("[]"), int(port))
    return found


def broker_list(services, id_field: str = "node_id") -> list[dict]:
    return [{id_field: broker_id, "host": host, "port": port}
            for broker_id, (host, port) in sorted(endpoints(services).items())]


def partition_error(services, error: BaseException, topic: str, partition: int) -> dict:
    """A partition answer's error fields for a raised error: the code, the message and, for NOT_LEADER, the
    current leader (the versions that have it carry it in their tagged current_leader fields)."""
    values = {"error_code": codes.code_of(error), "error_message": codes.message_of(error)}
    if isinstance(error, errors.NotLeader) and error.leader_id is not None:
        values["current_leader"] = {"leader_id": error.leader_id, "leader_epoch": -1}
    return values


def leader_endpoints(services, answers) -> list[dict]:
    """The node_endpoints of the leaders named in NOT_LEADER answers (Produce v10+, Fetch v16+)."""
    named = {a["current_leader"]["leader_id"] for a in answers if "current_leader" in a}
    known = endpoints(services)
    return [{"node_id": b, "host": known[b][0], "port": known[b][1]} for b in sorted(named) if b in known]


def leader_and_isr(services, topic, partition: int) -> tuple[int | None, list[int]]:
    group_id = partition_group_id(topic.topic_id, partition)
    return services.context.leader_of(group_id), services.context.isr_of(group_id)


_TOPIC_ID_PREFIX = int.from_bytes(b"raftbus\x00", "big") << 64


def topic_uuid(topic) -> uuid.UUID:
    """A topic's Kafka topic id: its raftbus topic id under a fixed prefix (never Kafka's reserved zero or one
    ids), so a topic created again under the same name has a new one."""
    return uuid.UUID(int=_TOPIC_ID_PREFIX | topic.topic_id)


def wrong_kind(topic) -> errors.WrongTopicKind:
    return errors.WrongTopicKind(f"topic {topic.name!r} is a {topic.kind} topic; the Kafka port serves stream "
                                 f"topics only")
