"""Kafka's classic group protocol: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), DescribeGroups (15), ListGroups (16) and DeleteGroups (42), over the coordinator of
broker/groups/coordinator.py.

Every group's coordinator is the controller (the metadata group's leader): FindCoordinator names it, and another
broker answers the membership calls with NOT_COORDINATOR, so clients find it again after a failover. The group
state the coordinator commits lives in the metadata group, so a new controller serves the same group: its
members join again at most (docs/kafka.md, "Consumer groups").
"""
from __future__ import annotations

from raftbus.client import errors

from raftbus.broker.groups import consumer_protocol, rules
from raftbus.broker.groups.coordinator import JoinRequest
from raftbus.broker.kafka import codes
from raftbus.broker.kafka.apis.common import endpoints
from raftbus.broker.kafka.schema import millis
from raftbus.broker.kafka.session import ADMIN, CLUSTER, CONSUME, GROUP

KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1
AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)


def _failure(exc: BaseException) -> tuple[int, str]:
    return codes.group_code_of(exc), codes.message_of(exc)


def find_coordinator_handler(services):
    def one(session, key: str, key_type: int) -> dict:
        answer = {"key": key, "node_id": -1, "host": "", "port": -1}
        if key_type == KEY_TYPE_TRANSACTION:
            return {**answer, "error_code": codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "error_message": "transactions are not supported"}
        if key_type != KEY_TYPE_GROUP:
            return {**answer, "error_code": codes.INVALID_REQUEST, "error_message": f"key type {key_type}"}
        denied = session.denied(GROUP, key, CONSUME)
        if denied:
            return {**answer, "error_code": denied, "error_message": "not authorized"}
        controller = services.context.controller_id()
        known = endpoints(services)
        if controller is None or controller not in known:
            return {**answer, "error_code": codes.COORDINATOR_NOT_AVAILABLE,
                    "error_message": "the metadata group has no leader right now"}
        host, port = known[controller]
        return {**answer, "error_code": codes.NONE, "error_message": None, "node_id": controller, "host": host,
                "port": port}

    async def find_coordinator(request) -> dict:
        body = request.body
        key_type = getattr(body, "key_type", KEY_TYPE_GROUP)
        if request.version >= 4:
            return {"coordinators": [one(request.session, key, key_type) for key in body.coordinator_keys]}
        answer = one(request.session, body.key, key_type)
        answer.pop("key")
        return answer

    return find_coordinator


def join_group_handler(services):
    coordinator = services.coordinator

    async def join_group(request) -> dict:
        body, session = request.body, request.session
        failed = {"member_id": body.member_id, "generation_id": -1, "leader": "", "members": []}
        denied = session.denied(GROUP, body.group_id, CONSUME)
        if denied:
            return {**failed, "error_code": denied}
        session_timeout_ms = millis(body.session_timeout)
        rebalance_timeout_ms = millis(getattr(body, "rebalance_timeout", -1))
        join = JoinRequest(group=body.group_id, member_id=body.member_id,
                           instance_id=getattr(body, "group_instance_id", None) or "",
                           client_id=rules.printable_client_id(request.header.client_id),
                           client_host=session.client_host,
                           protocol_type=body.protocol_type,
                           protocols=tuple((p.name, bytes(p.metadata)) for p in body.protocols),
                           session_timeout_ms=session_timeout_ms,
                           rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms,
                           version=request.version)
        try:
            rules.validate_group_name(body.group_id)
            answer = await coordinator.join(join)
        except Exception as exc:
            code, _ = _failure(exc)
            return {**failed, "error_code": code}
        if answer.member_id_required:
            return {**failed, "error_code": codes.MEMBER_ID_REQUIRED, "member_id": answer.member_id}
        return {"error_code": codes.NONE, "generation_id": answer.generation, "protocol_type": answer.protocol_type,
                "protocol_name": answer.protocol_name, "leader": answer.leader, "member_id": answer.member_id,
                "skip_assignment": answer.skip_assignment,
                "members": [{"member_id": m, "group_instance_id": i, "metadata": md} for m, i, md in answer.members]}

    return join_group


def sync_group_handler(services):
    coordinator = services.coordinator

    async def sync_group(request) -> dict:
        body, session = request.body, request.session
        denied = session.denied(GROUP, body.group_id, CONSUME)
        if denied:
            return {"error_code": denied, "assignment": b""}
        try:
            answer = await coordinator.sync(
                body.group_id, body.member_id, getattr(body, "group_instance_id", None) or "", body.generation_id,
                getattr(body, "protocol_type", None), getattr(body, "protocol_name", None),
                [(a.member_id, bytes(a.assignment)) for a in body.assignments])
        except Exception as exc:
            return {"error_code": _failure(exc)[0], "assignment": b""}
        return {"error_code": codes.NONE, "protocol_type": answer.protocol_type,
                "protocol_name": answer.protocol_name, "assignment": answer.assignment}

    return sync_group


def heartbeat_handler(services):
    coordinator = services.coordinator

    async def heartbeat(request) -> dict:
        body = request.body
        denied = request.session.denied(GROUP, body.group_id, CONSUME)
        if denied:
            return {"error_code": denied}
        try:
            await coordinator.heartbeat(body.group_id, body.member_id,
                                        getattr(body, "group_instance_id", None) or "", body.generation_id,
                                        released=request.session.later_request(request.sequence))
        except Exception as exc:
            return {"error_code": _failure(exc)[0]}
        return {"error_code": codes.NONE}

    return heartbeat


def leave_group_handler(services):
    coordinator = services.coordinator

    async def leave_group(request) -> dict:
        body = request.body
        if request.version >= 3:
            members = [(m.member_id, m.group_instance_id or "") for m in body.members]
        else:
            members = [(body.member_id, "")]
        denied = request.session.denied(GROUP, body.group_id, CONSUME)
        if denied:
            return {"error_code": denied, "members": []}
        try:
            outcomes = await coordinator.leave(body.group_id, members)
        except Exception as exc:
            return {"error_code": _failure(exc)[0], "members": []}
        if request.version < 3:
            return {"error_code": codes.code_of(outcomes[0]) if outcomes[0] is not None else codes.NONE}
        return {"error_code": codes.NONE, "members": [
            {"member_id": m, "group_instance_id": i or None,
             "error_code": codes.NONE if outcome is None else codes.code_of(outcome)}
            for (m, i), outcome in zip(members, outcomes)]}

    return leave_group


# ---------------------------------------------------------------------- views of every group (any protocol)
def kafka_state(services, group) -> str:
    """Kafka's name of a group's state, whatever its protocol."""
    if group.protocol == rules.CLASSIC and group.classic is not None:
        return services.coordinator.kafka_state(group)
    if not group.members:
        return "Empty"
    return "Stable" if group.state == rules.STABLE else ("Reconciling" if group.protocol == rules.CONSUMER
                                                          else "PreparingRebalance")


def protocol_type_of(group) -> str:
    """What ListGroups and DescribeGroups call a group's protocol type: a classic group's own; "consumer" for
    Kafka's consumer protocol and for raftbus's own consumers (they consume as Kafka consumers do)."""
    if group.classic is not None:
        return group.classic.protocol_type
    return consumer_protocol.PROTOCOL_TYPE


def group_type_of(group) -> str:
    return "classic" if group.protocol == rules.CLASSIC else ("consumer" if group.protocol == rules.CONSUMER
                                                               else "raftbus")


def list_groups_handler(services):
    async def list_groups(request) -> dict:
        body, session = request.body, request.session
        try:
            services.context.require_controller()
        except errors.RaftbusError as exc:
            return {"error_code": _failure(exc)[0], "groups": []}
        states = {s.lower() for s in getattr(body, "states_filter", None) or ()}
        types = {t.lower() for t in getattr(body, "types_filter", None) or ()}
        everything = not session.denied(CLUSTER, "", ADMIN)
        listed = []
        for name, group in sorted(services.context.metadata_sm.groups().items()):
            if not everything and session.denied(GROUP, name, CONSUME):
                continue
            state = kafka_state(services, group)
            kind = group_type_of(group)
            if (states and state.lower() not in states) or (types and kind not in types):
                continue
            listed.append({"group_id": name, "protocol_type": protocol_type_of(group), "group_state": state,
                           "group_type": kind})
        return {"error_code": codes.NONE, "groups": listed}

    return list_groups


def describe_groups_handler(services):
    def describe(session, name: str) -> dict:
        answer = {"group_id": name, "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": [],
                  "authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN}
        denied = session.denied(GROUP, name, CONSUME)
        if denied:
            return {**answer, "error_code": denied}
        try:
            services.context.require_controller()
            rules.validate_group_name(name)
        except errors.RaftbusError as exc:
            return {**answer, "error_code": _failure(exc)[0], "error_message": codes.message_of(exc)}
        group = services.context.metadata_sm.group(name)
        if group is None:  # Kafka describes an unknown group as Dead, without an error
            return {**answer, "error_code": codes.NONE}
        if group.classic is not None:
            classic = group.classic
            members = [{"member_id": m.member_id, "group_instance_id": m.instance_id or None,
                        "client_id": m.client_id, "client_host": m.client_host,
                        "member_metadata": m.metadata_of(classic.protocol_name), "member_assignment": m.assignment}
                       for m in classic.members.values()]
            protocol_data = classic.protocol_name if kafka_state(services, group) == "Stable" else ""
        else:  # raftbus's own and the consumer protocol's members, in the consumer protocol's encoding
            owned = group.owned_by_member()
            members = [{"member_id": m.member_id, "client_id": m.client_id, "client_host": "",
                        "member_metadata": consumer_protocol.encode_subscription(m.topics),
                        "member_assignment": consumer_protocol.encode_assignment(owned[m.member_id])}
                       for m in group.members.values()]
            protocol_data = "sticky" if members else ""
        return {**answer, "error_code": codes.NONE, "group_state": kafka_state(services, group),
                "protocol_type": protocol_type_of(group), "protocol_data": protocol_data, "members": members}

    async def describe_groups(request) -> dict:
        return {"groups": [describe(request.session, name) for name in request.body.groups]}

    return describe_groups


def delete_groups_handler(services):
    async def delete_one(session, name: str) -> dict:
        denied = session.denied(GROUP, name, ADMIN)
        if denied:
            return {"group_id": name, "error_code": denied}
        try:
            await services.listener.run_blocking(services.group_service.delete_group, name, services.offsets.delete)
        except Exception as exc:
            code = codes.NON_EMPTY_GROUP if isinstance(exc, errors.GroupNotEmpty) else _failure(exc)[0]
            return {"group_id": name, "error_code": code}
        return {"group_id": name, "error_code": codes.NONE}

    async def delete_groups(request) -> dict:
        return {"results": [await delete_one(request.session, name) for name in request.body.groups_names]}

    return delete_groups
