"""Kafka's committed offsets: OffsetCommit (8), OffsetFetch (9) and OffsetDelete (47), sent to the group's
coordinator and carried out on each partition's leader (broker/groups/offset_forwarder.py), where raftbus keeps
committed offsets in the partition's own Raft group: the same offsets raftbus's consumers commit and read, so either
port's consumers resume from the other's.

A classic group's commit is checked here first as Kafka's coordinator checks it (member, generation, not while the
leader's assignment is awaited), then again by the partition's leader against its own metadata replica; a member
of Kafka's consumer protocol must own the partition (raftbus's fencing, its member epoch as the generation).
Commits may move an offset backwards, as Kafka's do.
"""
from __future__ import annotations

import asyncio

from raftbus.client import errors

from raftbus.broker.groups import classic, rules
from raftbus.broker.kafka import codes
from raftbus.broker.kafka.session import ADMIN, CONSUME, GROUP, TOPIC

NO_EPOCH = -1


def partition_code(exc: BaseException, consumer_protocol: bool) -> int:
    """The Kafka code of an error from a partition's part of a group offset call."""
    if isinstance(exc, errors.StaleGeneration):
        return codes.STALE_MEMBER_EPOCH if consumer_protocol else codes.ILLEGAL_GENERATION
    if isinstance(exc, errors.PartitionNotAssigned):
        return codes.STALE_MEMBER_EPOCH if consumer_protocol else codes.REBALANCE_IN_PROGRESS
    if isinstance(exc, errors.MetadataBehind):
        return codes.COORDINATOR_LOAD_IN_PROGRESS
    if isinstance(exc, errors.NotLeader | errors.LeaderNotAvailable | errors.Unavailable | errors.RequestTimedOut):
        return codes.REQUEST_TIMED_OUT  # the partition's leader was not reached in time: retry
    if isinstance(exc, errors.UnknownTopic | errors.UnknownPartition):
        return codes.UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, errors.InvalidName):
        return codes.INVALID_GROUP_ID
    return codes.code_of(exc)


def _by_topic(pairs) -> list[dict]:
    topics: dict[str, list] = {}
    for name, answer in pairs:
        topics.setdefault(name, []).append(answer)
    return [{"name": name, "partitions": answers} for name, answers in topics.items()]


def _check_partition(context, topic: str, partition: int) -> None:
    found = context.topic(topic)
    if found.kind != "stream":
        raise errors.WrongTopicKind(f"topic {topic!r} is a {found.kind} topic; groups consume stream topics")
    if not 0 <= partition < len(found.partitions):
        raise errors.UnknownPartition(f"topic {topic!r} has no partition {partition}")


def commit_handler(services):
    context, forwarder, settings = services.context, services.offsets, services.group_settings

    def group_check(name: str, member_id: str, instance_id: str, generation: int):
        """The group's protocol after Kafka's coordinator checks of the member (raised as typed errors)."""
        context.require_controller()
        rules.validate_group_name(name)
        group = context.metadata_sm.group(name)
        if (group is not None and group.protocol == rules.CLASSIC) or (generation < 0 and not member_id):
            if instance_id and group is not None and group.classic is not None:
                static = group.classic.static_member(instance_id)
                if static is not None and static.member_id != member_id:
                    raise errors.FencedInstanceId(f"instance {instance_id!r} is now member {static.member_id!r}")
            classic.check_commit(group, context.metadata_sm.applied_index(), name, member_id, generation)
            return rules.CLASSIC
        if group is None or member_id not in group.members:
            raise errors.UnknownMember(f"member {member_id!r} is not in group {name!r}")
        return group.protocol

    def commit_one(name, member_id, generation, topic, partition, offset, metadata):
        _check_partition(context, topic, partition)
        forwarder.commit(name, member_id=member_id, generation=generation, topic=topic, partition=partition,
                         offset=offset, metadata=metadata)

    async def offset_commit(request) -> dict:
        async with request.session.commits:  # a connection's commits land in the order they came
            return await commit(request)

    async def commit(request) -> dict:
        body, session = request.body, request.session
        generation = getattr(body, "generation_id_or_member_epoch", getattr(body, "generation_id", -1))
        member_id = getattr(body, "member_id", "") or ""
        instance_id = getattr(body, "group_instance_id", None) or ""
        wanted = [(t.name, p) for t in body.topics for p in t.partitions]

        def everywhere(code: int) -> dict:
            return {"topics": _by_topic((t, {"partition_index": p.partition_index, "error_code": code})
                                        for t, p in wanted)}

        denied = session.denied(GROUP, body.group_id, CONSUME)
        if denied:
            return everywhere(denied)
        try:
            protocol = group_check(body.group_id, member_id, instance_id, generation)
        except errors.RaftbusError as exc:
            consumer = getattr(context.metadata_sm.group(body.group_id), "protocol", "") == rules.CONSUMER
            if consumer and isinstance(exc, errors.StaleGeneration):
                return everywhere(codes.STALE_MEMBER_EPOCH)
            return everywhere(codes.group_code_of(exc))
        if generation < 0 and not member_id:
            await _register(services, body.group_id, {t for t, _ in wanted})

        async def one(topic: str, p) -> dict:
            answer = {"partition_index": p.partition_index}
            if session.denied(TOPIC, topic, CONSUME):
                return {**answer, "error_code": codes.TOPIC_AUTHORIZATION_FAILED}
            metadata = p.committed_metadata or ""
            if len(metadata.encode()) > settings.offset_metadata_bytes_max:
                return {**answer, "error_code": codes.OFFSET_METADATA_TOO_LARGE}
            try:
                await services.offset_call(commit_one, body.group_id, member_id, generation, topic,
                                           p.partition_index, p.committed_offset, metadata)
            except Exception as exc:
                return {**answer, "error_code": partition_code(exc, protocol == rules.CONSUMER)}
            return {**answer, "error_code": codes.NONE}

        answers = await asyncio.gather(*(one(t, p) for t, p in wanted))
        return {"topics": _by_topic((t, a) for (t, _), a in zip(wanted, answers))}

    return offset_commit


async def _register(services, name: str, topics) -> None:
    """A group committing without members (admin tools, consumers that assign themselves partitions) is listed
    like any other: registered (empty, holding the topics) when it does not hold them yet."""
    group = services.context.metadata_sm.group(name)
    if group is not None and set(topics) <= set(group.topics):
        return
    try:
        streams = [t for t in topics if getattr(services.context.metadata_sm.topic(t), "kind", "") == "stream"]
        if streams:
            await services.listener.run_blocking(services.group_service.register, name, streams)
    except errors.RaftbusError:
        pass  # the offsets are committed all the same; the listing waits for the next commit


def fetch_handler(services):
    context, forwarder = services.context, services.offsets

    def fetch_one(name, topic, partition, member):
        _check_partition(context, topic, partition)
        return forwarder.fetch(name, topic, partition, member)

    async def one_group(session, name: str, topics, member_id: str, member_epoch: int) -> dict:
        answer = {"group_id": name, "topics": []}
        denied = session.denied(GROUP, name, CONSUME)
        if denied:
            return {**answer, "error_code": denied}
        try:
            context.require_controller()
            rules.validate_group_name(name)
        except errors.RaftbusError as exc:
            return {**answer, "error_code": codes.group_code_of(exc)}
        group = context.metadata_sm.group(name)
        consumer = group is not None and group.protocol == rules.CONSUMER
        if topics is None:  # every partition of the topics the group holds offsets of
            held = group.topics if group is not None else ()
            wanted = [(t, p) for t in held if not session.denied(TOPIC, t, CONSUME)
                      for p in range(len(getattr(context.metadata_sm.topic(t), "partitions", ())))]
        else:
            wanted = [(t.name, p) for t in topics for p in t.partition_indexes]
        owner = member_id if consumer and member_id and member_id in group.members else ""

        async def one(topic: str, partition: int) -> dict:
            row = {"partition_index": partition, "committed_offset": -1, "committed_leader_epoch": NO_EPOCH,
                   "metadata": ""}
            if session.denied(TOPIC, topic, CONSUME):
                return {**row, "error_code": codes.TOPIC_AUTHORIZATION_FAILED}
            member = (owner, member_epoch) if owner and group.owners.get((topic, partition)) is not None and \
                group.owners[(topic, partition)].member_id == owner else None
            try:
                offset, metadata = await services.offset_call(fetch_one, name, topic, partition, member)
            except Exception as exc:
                return {**row, "error_code": partition_code(exc, consumer)}
            return {**row, "committed_offset": offset, "metadata": metadata, "error_code": codes.NONE}

        answers = await asyncio.gather(*(one(t, p) for t, p in wanted))
        if topics is None:  # a listing shows only the partitions with a committed offset
            pairs = [(t, a) for (t, _), a in zip(wanted, answers) if a["committed_offset"] >= 0 or a["error_code"]]
        else:
            pairs = list(zip((t for t, _ in wanted), answers))
        return {**answer, "error_code": codes.NONE, "topics": _by_topic(pairs)}

    async def offset_fetch(request) -> dict:
        body, session = request.body, request.session
        if request.version >= 8:
            groups = await asyncio.gather(*(one_group(session, g.group_id, g.topics, getattr(g, "member_id", None) or "",
                                                      getattr(g, "member_epoch", NO_EPOCH)) for g in body.groups))
            return {"groups": list(groups)}
        answer = await one_group(session, body.group_id, body.topics, "", NO_EPOCH)
        return {"error_code": answer["error_code"], "topics": answer["topics"]}

    return offset_fetch


def delete_handler(services):
    context, forwarder = services.context, services.offsets

    def delete_one(name, topic, partition):
        _check_partition(context, topic, partition)
        forwarder.delete(name, topic, partition)

    async def offset_delete(request) -> dict:
        body, session = request.body, request.session
        wanted = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
        denied = session.denied(GROUP, body.group_id, ADMIN)
        if denied:
            return {"error_code": denied, "topics": []}
        try:
            context.require_controller()
            rules.validate_group_name(body.group_id)
            if context.metadata_sm.group(body.group_id) is None:
                raise errors.UnknownGroup(f"group {body.group_id!r} does not exist")
        except errors.RaftbusError as exc:
            return {"error_code": codes.group_code_of(exc), "topics": []}

        async def one(topic: str, partition: int) -> dict:
            if session.denied(TOPIC, topic, CONSUME):
                return {"partition_index": partition, "error_code": codes.TOPIC_AUTHORIZATION_FAILED}
            try:
                await services.offset_call(delete_one, body.group_id, topic, partition)
            except Exception as exc:
                return {"partition_index": partition, "error_code": partition_code(exc, False)}
            return {"partition_index": partition, "error_code": codes.NONE}

        answers = await asyncio.gather(*(one(t, p) for t, p in wanted))
        return {"error_code": codes.NONE, "topics": _by_topic((t, a) for (t, _), a in zip(wanted, answers))}

    return offset_delete
