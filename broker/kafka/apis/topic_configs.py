"""Kafka topic configs ⇄ raftbus topic settings: which names exist, which can be set, and their values."""
from __future__ import annotations

from typing import NamedTuple

from raftbus.broker import model

CREATE_TIME, LOG_APPEND_TIME = "CreateTime", "LogAppendTime"
# DescribeConfigs sources and types (Kafka's ConfigSource and ConfigType numbers)
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
STRING, INT, LONG = 2, 3, 5


class TopicConfig(NamedTuple):
    name: str
    setting: str | None  # the raftbus topic setting it sets (None: read-only)
    config_type: int
    doc: str


TOPIC_CONFIGS = (
    TopicConfig("retention.ms", "retention_ms", LONG, "how long a batch is kept (ms, -1 = forever)"),
    TopicConfig("retention.bytes", "retention_bytes", LONG, "the partition size kept (bytes, -1 = unbounded)"),
    TopicConfig("message.timestamp.type", "timestamp_type", STRING,
                "CreateTime (the producer's timestamps) or LogAppendTime (the leader's time at append)"),
    TopicConfig("cleanup.policy", "cleanup_policy", STRING,
                "delete (retention), compact (each key's latest record kept) or compact,delete"),
    TopicConfig("min.compaction.lag.ms", "min_compaction_lag_ms", LONG, "no record younger than this is compacted"),
    TopicConfig("max.compaction.lag.ms", "max_compaction_lag_ms", LONG,
                "a compaction pass starts once the oldest record appended since the last is this old"),
    TopicConfig("delete.retention.ms", "delete_retention_ms", LONG, "how long a tombstone is kept"),
    TopicConfig("segment.bytes", "segment_bytes", INT, "bytes appended since the last compaction pass that start "
                                                       "the next"),
    TopicConfig("max.message.bytes", None, INT, "the largest record batch (the broker's batch_bytes_max)"),
    TopicConfig("min.insync.replicas", None, INT, "a write commits on a majority of the partition's replicas"),
    TopicConfig("raftbus.kind", None, STRING, "stream or queue (the Kafka port serves stream topics)"),
)
BY_NAME = {c.name: c for c in TOPIC_CONFIGS}


def topic_values(topic, settings) -> dict[str, tuple[str, int]]:
    """config name -> (value, source) of a topic."""
    replicas = len(topic.partitions[0].replicas) if topic.partitions else 1
    timestamp_type = topic.timestamp_type
    return {
        "retention.ms": (str(topic.retention_ms), _source(topic.retention_ms, settings.default_retention_ms)),
        "retention.bytes": (str(topic.retention_bytes),
                            _source(topic.retention_bytes, settings.default_retention_bytes)),
        "message.timestamp.type": (timestamp_type, _source(timestamp_type, CREATE_TIME)),
        **_compaction_values(topic.compaction),
        "max.message.bytes": (str(settings.batch_bytes_max), STATIC_BROKER_CONFIG),
        "min.insync.replicas": (str(replicas // 2 + 1), DEFAULT_CONFIG),
        "raftbus.kind": (topic.kind, DYNAMIC_TOPIC_CONFIG),
    }


_DEFAULT_COMPACTION = model.CompactionConfig()


def _compaction_values(config) -> dict[str, tuple[str, int]]:
    return {name: (str(getattr(config, c.setting)), _source(getattr(config, c.setting),
                                                             getattr(_DEFAULT_COMPACTION, c.setting)))
            for name, c in BY_NAME.items() if c.setting in model.COMPACTION_OPTIONS}


def split_compaction(changes: dict) -> tuple[dict, dict]:
    """(the other settings, the compaction options) of settings_of's answer, as AdminService takes them."""
    compaction = {k: changes.pop(k) for k in list(changes) if k in model.COMPACTION_OPTIONS}
    return changes, compaction


def _source(value, default) -> int:
    return DEFAULT_CONFIG if value == default else DYNAMIC_TOPIC_CONFIG


def settings_of(configs, settings, *, allow_reset: bool = False) -> dict:
    """{raftbus setting: value} of (name, value) pairs; InvalidConfig (INVALID_CONFIG) for a name that is
    unknown or read-only, or a value that does not parse. A None value (allow_reset) means the default."""
    out = {}
    for name, value in configs:
        config = BY_NAME.get(name)
        if config is None or config.setting is None:
            known = ", ".join(c.name for c in TOPIC_CONFIGS if c.setting)
            raise InvalidConfig(f"config {name!r} cannot be set on a raftbus topic (settable: {known})")
        if value is None:
            if not allow_reset:
                raise InvalidConfig(f"config {name!r} needs a value")
            value = {"retention_ms": str(settings.default_retention_ms),
                     "retention_bytes": str(settings.default_retention_bytes),
                     "timestamp_type": CREATE_TIME,
                     **{n: str(getattr(_DEFAULT_COMPACTION, n)) for n in model.COMPACTION_OPTIONS}}[config.setting]
        out[config.setting] = _parse(config, value)
    return out


def _parse(config: TopicConfig, value: str):
    if config.setting == "cleanup_policy":
        policies = {p.strip() for p in (value or "").split(",")}
        for policy in model.CLEANUP_POLICIES:
            if policies == set(policy.split(",")):
                return policy
        raise InvalidConfig(f"cleanup.policy is delete, compact or compact,delete, not {value!r}")
    if config.setting == "timestamp_type":
        if value not in (CREATE_TIME, LOG_APPEND_TIME):
            raise InvalidConfig(f"message.timestamp.type is {CREATE_TIME} or {LOG_APPEND_TIME}, not {value!r}")
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidConfig(f"{config.name} must be an integer, not {value!r}") from None


class InvalidConfig(ValueError):
    """A config name or value the Kafka port cannot apply (answered INVALID_CONFIG)."""
