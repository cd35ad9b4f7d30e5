"""Kafka's consumer protocol (KIP-848): ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69), over
broker/groups/consumer_service.py (raftbus's own groups and sticky assignor, assigning on the broker).

Assignments name topics by id: a topic's id is derived from its raftbus topic id (`topic_uuid`), the same one
Metadata answers, so a topic deleted and created again under the same name has a new id, as in Kafka.
"""
from __future__ import annotations

from raftbus.client import errors

from raftbus.broker.groups import rules
from raftbus.broker.groups.consumer_service import ConsumerHeartbeat
from raftbus.broker.kafka import codes
from raftbus.broker.kafka.apis.common import topic_uuid
from raftbus.broker.kafka.schema import millis
from raftbus.broker.kafka.session import CONSUME, GROUP, TOPIC

SERVER_ASSIGNORS = ("uniform", "sticky", "range")  # every name is served by raftbus's sticky assignor
AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)
MEMBER_TYPE_CONSUMER = 1


def _names_by_id(context) -> dict:
    return {topic_uuid(t): t.name for t in context.metadata_sm.topics().values()}


def _by_topic(context, pairs, with_names: bool = False) -> list[dict]:
    ids = {t.name: topic_uuid(t) for t in context.metadata_sm.topics().values()}
    by_topic: dict[str, list[int]] = {}
    for topic, partition in pairs:
        by_topic.setdefault(topic, []).append(partition)
    rows = []
    for topic, partitions in sorted(by_topic.items()):
        row = {"topic_id": ids.get(topic), "partitions": sorted(partitions)}
        if with_names:
            row["topic_name"] = topic
        rows.append(row)
    return rows


def heartbeat_handler(services):
    context = services.context

    async def consumer_group_heartbeat(request) -> dict:
        body, session = request.body, request.session
        failed = {"member_id": body.member_id or None, "member_epoch": body.member_epoch, "heartbeat_interval": 0}
        denied = session.denied(GROUP, body.group_id, CONSUME)
        if denied:
            return {**failed, "error_code": denied, "error_message": "not authorized"}
        topics = tuple(body.subscribed_topic_names) if body.subscribed_topic_names is not None else None
        if body.subscribed_topic_regex:
            return {**failed, "error_code": codes.INVALID_REQUEST,
                    "error_message": "subscriptions by regular expression are not served; name the topics"}
        if body.server_assignor and body.server_assignor not in SERVER_ASSIGNORS:
            return {**failed, "error_code": codes.UNSUPPORTED_ASSIGNOR,
                    "error_message": f"server assignors are {', '.join(SERVER_ASSIGNORS)}"}
        if topics is not None:
            refused = [t for t in topics if session.denied(TOPIC, t, CONSUME)]
            if refused:
                return {**failed, "error_code": codes.TOPIC_AUTHORIZATION_FAILED,
                        "error_message": f"may not consume {refused[0]!r}"}
        if request.version >= 1 and not body.member_id:
            return {**failed, "error_code": codes.INVALID_REQUEST,
                    "error_message": "the member names its own member id"}
        owned = None
        if body.topic_partitions is not None:
            names = _names_by_id(context)
            owned = tuple((names[t.topic_id], p) for t in body.topic_partitions if t.topic_id in names
                          for p in t.partitions)
        beat = ConsumerHeartbeat(group=body.group_id, member_id=body.member_id, member_epoch=body.member_epoch,
                                 client_id=request.header.client_id or "",
                                 rebalance_timeout_ms=millis(body.rebalance_timeout), topics=topics, owned=owned)
        try:
            answer = await services.consumer_groups.heartbeat(beat)
        except Exception as exc:
            return {**failed, "error_code": codes.group_code_of(exc, consumer_protocol=True),
                    "error_message": codes.message_of(exc)}
        assignment = None if answer.assignment is None else {
            "topic_partitions": _by_topic(context, answer.assignment)}
        return {"error_code": codes.NONE, "member_id": answer.member_id, "member_epoch": answer.member_epoch,
                "heartbeat_interval": answer.heartbeat_interval_ms, "assignment": assignment}

    return consumer_group_heartbeat


def describe_handler(services):
    context = services.context

    def describe(session, name: str) -> dict:
        answer = {"group_id": name, "group_state": "Dead", "group_epoch": -1, "assignment_epoch": -1,
                  "assignor_name": "", "members": [], "authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN}
        denied = session.denied(GROUP, name, CONSUME)
        if denied:
            return {**answer, "error_code": denied, "error_message": "not authorized"}
        try:
            context.require_controller()
            rules.validate_group_name(name)
        except errors.RaftbusError as exc:
            return {**answer, "error_code": codes.group_code_of(exc), "error_message": codes.message_of(exc)}
        group = context.metadata_sm.group(name)
        if group is None or group.protocol == rules.CLASSIC:
            return {**answer, "error_code": codes.GROUP_ID_NOT_FOUND,
                    "error_message": f"group {name!r} is not a group of the consumer protocol"}
        owned = group.owned_by_member()
        members = [{"member_id": m.member_id, "member_epoch": group.generation, "client_id": m.client_id,
                    "client_host": "", "subscribed_topic_names": list(m.topics),
                    "assignment": {"topic_partitions": _by_topic(context, owned[m.member_id], True)},
                    "target_assignment": {"topic_partitions": _by_topic(context, m.target, True)},
                    "member_type": MEMBER_TYPE_CONSUMER}
                   for m in group.members.values()]
        state = "Empty" if not group.members else ("Stable" if group.state == rules.STABLE else "Reconciling")
        return {**answer, "error_code": codes.NONE, "group_state": state, "group_epoch": group.generation,
                "assignment_epoch": group.generation, "assignor_name": "uniform", "members": members}

    async def consumer_group_describe(request) -> dict:
        return {"groups": [describe(request.session, name) for name in request.body.group_ids]}

    return consumer_group_describe
