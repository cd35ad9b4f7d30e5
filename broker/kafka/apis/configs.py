"""DescribeConfigs (32) and IncrementalAlterConfigs (44) over the topic settings raftbus has
(broker/kafka/apis/topic_configs.py) and, read-only, the broker's defaults."""
from __future__ import annotations

from raftbus.broker.kafka import codes
from raftbus.broker.kafka.apis.topic_configs import (
    BY_NAME,
    DEFAULT_CONFIG,
    INT,
    LONG,
    STATIC_BROKER_CONFIG,
    InvalidConfig,
    settings_of,
    split_compaction,
    topic_values,
)
from raftbus.broker.kafka.apis.topics import topic_error
from raftbus.broker.kafka.session import ADMIN, CLUSTER, DESCRIBE, TOPIC

RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
SET, DELETE = 0, 1


def broker_values(settings) -> dict[str, tuple[str, int, int]]:
    """The broker's settings Kafka clients look for: name -> (value, source, type)."""
    return {
        "broker.id": (str(settings.node_id), STATIC_BROKER_CONFIG, INT),
        "message.max.bytes": (str(settings.batch_bytes_max), STATIC_BROKER_CONFIG, INT),
        "num.partitions": (str(settings.default_partitions), STATIC_BROKER_CONFIG, INT),
        "default.replication.factor": (str(settings.default_replication_factor), STATIC_BROKER_CONFIG, INT),
        "log.retention.ms": (str(settings.default_retention_ms), STATIC_BROKER_CONFIG, LONG),
        "log.retention.bytes": (str(settings.default_retention_bytes), STATIC_BROKER_CONFIG, LONG),
        "auto.create.topics.enable": ("false", DEFAULT_CONFIG, 1),
    }


def describe_handler(services):
    context, settings = services.context, services.settings

    def describe(session, resource, version: int) -> dict:
        answer = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
        keys = set(resource.configuration_keys) if resource.configuration_keys else None
        if resource.resource_type == RESOURCE_TOPIC:
            denied = session.denied(TOPIC, resource.resource_name, DESCRIBE)
            if denied:
                return {**answer, "error_code": denied, "error_message": "not authorized", "configs": []}
            topic = context.metadata_sm.topic(resource.resource_name)
            if topic is None:
                return {**answer, "error_code": codes.UNKNOWN_TOPIC_OR_PARTITION,
                        "error_message": f"topic {resource.resource_name!r} does not exist", "configs": []}
            rows = [(name, value, source, BY_NAME[name].setting is None, BY_NAME[name].config_type,
                     BY_NAME[name].doc) for name, (value, source) in topic_values(topic, settings).items()]
        elif resource.resource_type == RESOURCE_BROKER:
            if session.denied(CLUSTER, "", DESCRIBE):
                return {**answer, "error_code": codes.CLUSTER_AUTHORIZATION_FAILED,
                        "error_message": "not authorized", "configs": []}
            rows = [(name, value, source, True, kind, None)
                    for name, (value, source, kind) in broker_values(settings).items()]
        else:
            return {**answer, "error_code": codes.INVALID_REQUEST,
                    "error_message": f"resource type {resource.resource_type} is not a topic (2) or a broker (4)",
                    "configs": []}
        configs = [{"name": name, "value": value, "read_only": read_only, "config_source": source,
                    "is_default": source == DEFAULT_CONFIG, "is_sensitive": False, "synonyms": [],
                    "config_type": kind, "documentation": doc}
                   for name, value, source, read_only, kind, doc in rows if keys is None or name in keys]
        return {**answer, "error_code": codes.NONE, "configs": configs}

    async def describe_configs(request) -> dict:
        return {"results": [describe(request.session, r, request.version) for r in request.body.resources]}

    return describe_configs


def alter_handler(services):
    admin, settings = services.admin, services.settings

    async def incremental_alter_configs(request) -> dict:
        body = request.body
        answers = []
        for resource in body.resources:
            answer = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
            if resource.resource_type != RESOURCE_TOPIC:
                answers.append({**answer, "error_code": codes.INVALID_REQUEST,
                                "error_message": "only topic configs can be altered"})
                continue
            denied = request.session.denied(TOPIC, resource.resource_name, ADMIN)
            if denied:
                answers.append({**answer, "error_code": denied, "error_message": "not authorized"})
                continue
            try:
                pairs = []
                for config in resource.configs:
                    if config.config_operation not in (SET, DELETE):
                        raise InvalidConfig(f"{config.name}: only SET (0) and DELETE (1) apply to these configs")
                    pairs.append((config.name, config.value if config.config_operation == SET else None))
                changes, compaction = split_compaction(settings_of(pairs, settings, allow_reset=True))
                if (changes or compaction) and not body.validate_only:
                    await services.listener.run_blocking(lambda: admin.alter_topic(resource.resource_name,
                                                                                   compaction=compaction,
                                                                                   **changes))
                elif body.validate_only:
                    services.context.topic(resource.resource_name)
                answers.append({**answer, "error_code": codes.NONE})
            except Exception as exc:
                answers.append({**answer, **topic_error(exc)})
        return {"responses": answers}

    return incremental_alter_configs
