"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37): AdminService's topic calls, on the controller.

They wait for the metadata group's commit, so they run on the listener's executor. A broker that is not the
controller answers NOT_CONTROLLER (Kafka's admin clients send these to the controller Metadata names). Replica
assignments are raftbus's to place: a request naming them is refused with INVALID_REQUEST.
"""
from __future__ import annotations

from raftbus.client import errors

from raftbus.broker import model
from raftbus.broker.kafka import codes
from raftbus.broker.kafka.apis.topic_configs import BY_NAME, InvalidConfig, settings_of, split_compaction, \
    topic_values
from raftbus.broker.kafka.session import ADMIN, TOPIC


def topic_error(exc: BaseException) -> dict:
    """error_code and error_message of a refused topic call."""
    if isinstance(exc, InvalidConfig):
        return {"error_code": codes.INVALID_CONFIG, "error_message": str(exc)}
    if isinstance(exc, errors.NotLeader | errors.LeaderNotAvailable):
        return {"error_code": codes.NOT_CONTROLLER, "error_message": codes.message_of(exc)}
    return {"error_code": codes.code_of(exc), "error_message": codes.message_of(exc)}


def create_handler(services):
    admin, settings = services.admin, services.settings

    def create(name: str, partitions: int, replication_factor: int, options: dict, validate_only: bool):
        model.validate_topic_name(name)
        if validate_only:
            if services.context.metadata_sm.topic(name) is not None:
                raise errors.TopicExists(f"topic {name!r} already exists")
            services.context.require_controller()
            return None
        timestamp_type = options.pop("timestamp_type", None)
        options, compaction = split_compaction(options)
        view = admin.create_topic(name, partitions=partitions, replication_factor=replication_factor,
                                  compaction=compaction, **options)
        if timestamp_type is not None:
            view = admin.alter_topic(name, timestamp_type=timestamp_type)
        return view

    async def create_topics(request) -> dict:
        body = request.body
        answers = []
        for topic in body.topics:
            answer = {"name": topic.name}
            try:
                denied = request.session.denied(TOPIC, topic.name, ADMIN)
                if denied:
                    answers.append({**answer, "error_code": denied, "error_message": "not authorized"})
                    continue
                if topic.assignments:
                    raise errors.InvalidArgument("raftbus places replicas itself: leave assignments empty")
                options = settings_of([(c.name, c.value) for c in topic.configs], settings)
                partitions = None if topic.num_partitions == -1 else topic.num_partitions
                factor = None if topic.replication_factor == -1 else topic.replication_factor
                view = await services.listener.run_blocking(create, topic.name, partitions, factor, options,
                                                            bool(getattr(body, "validate_only", False)))
            except Exception as exc:
                answers.append({**answer, **topic_error(exc), "topic_config_error_code": 0,
                                "num_partitions": -1, "replication_factor": -1})
                continue
            answers.append({**answer, **_created(view, topic, settings)})
        return {"topics": answers}

    return create_topics


def _created(view, request_topic, settings) -> dict:
    if view is None:  # validate_only
        return {"error_code": codes.NONE, "num_partitions": request_topic.num_partitions,
                "replication_factor": request_topic.replication_factor, "configs": []}
    topic = view.topic
    configs = [{"name": name, "value": value, "read_only": BY_NAME[name].setting is None, "config_source": source,
                "is_sensitive": False} for name, (value, source) in topic_values(topic, settings).items()]
    return {"error_code": codes.NONE, "num_partitions": len(topic.partitions),
            "replication_factor": len(topic.partitions[0].replicas) if topic.partitions else -1,
            "configs": configs}


def delete_handler(services):
    async def delete_topics(request) -> dict:
        body = request.body
        names = list(body.topic_names) if hasattr(body, "topic_names") else [t.name for t in body.topics]
        answers = []
        for name in names:
            denied = request.session.denied(TOPIC, name, ADMIN)
            if denied:
                answers.append({"name": name, "error_code": denied, "error_message": "not authorized"})
                continue
            try:
                await services.listener.run_blocking(services.admin.delete_topic, name)
                answers.append({"name": name, "error_code": codes.NONE})
            except Exception as exc:
                answers.append({"name": name, **topic_error(exc)})
        return {"responses": answers}

    return delete_topics


def partitions_handler(services):
    def grow(name: str, count: int, validate_only: bool):
        topic = services.context.topic(name)
        if count <= len(topic.partitions):
            raise errors.InvalidPartitions(f"topic {name!r} has {len(topic.partitions)} partitions; it can only "
                                           f"grow, not become {count}")
        if validate_only:
            services.context.require_controller()
            return
        services.admin.alter_partitions(name, count)

    async def create_partitions(request) -> dict:
        body = request.body
        answers = []
        for topic in body.topics:
            denied = request.session.denied(TOPIC, topic.name, ADMIN)
            if denied:
                answers.append({"name": topic.name, "error_code": denied, "error_message": "not authorized"})
                continue
            try:
                if topic.assignments:
                    raise errors.InvalidArgument("raftbus places replicas itself: leave assignments empty")
                await services.listener.run_blocking(grow, topic.name, topic.count,
                                                     bool(getattr(body, "validate_only", False)))
                answers.append({"name": topic.name, "error_code": codes.NONE})
            except Exception as exc:
                answers.append({"name": topic.name, **topic_error(exc)})
        return {"results": answers}

    return create_partitions

