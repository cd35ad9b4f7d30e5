"""Cluster metadata values (brokers, topics, partition placement) and the pure rules that shape them."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from raftbus.client import errors

TOPIC_NAME_BYTES_MAX = 249
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class PartitionPlacement:
    """Where one partition's replicas live; replicas[0] is the preferred leader. While a reassignment runs,
    `target` is where they are going (the partition's leader moves them one step at a time, metadata/reassignment_driver.py)
    and `throttle_bytes_per_s` bounds what new replicas are sent while they catch up (0 = the broker default)."""

    partition: int
    replicas: tuple[int, ...]
    target: tuple[int, ...] = ()
    throttle_bytes_per_s: int = 0

    @property
    def hosts(self) -> tuple[int, ...]:
        """Every broker that holds (or is getting) a replica: the placement and the target."""
        return self.replicas + tuple(b for b in self.target if b not in self.replicas)

    def to_dict(self) -> dict:
        data = {"partition": self.partition, "replicas": list(self.replicas)}
        if self.target:
            data.update(target=list(self.target), throttle_bytes_per_s=self.throttle_bytes_per_s)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "PartitionPlacement":
        return cls(partition=int(data["partition"]), replicas=tuple(int(r) for r in data["replicas"]),
                   target=tuple(int(r) for r in data.get("target", ())),
                   throttle_bytes_per_s=int(data.get("throttle_bytes_per_s", 0)))


# ---------------------------------------------------------------------- queue topics
DEAD_LETTER_SUFFIX = ".dlq"


@dataclass(frozen=True)
class QueueConfig:
    """The per-topic rules of a queue topic, fixed when it is created (see docs/queues.md).

    A source queue topic names its dead-letter topic; the dead-letter topic names its source and never
    dead-letters itself (max_deliveries 0 = unlimited).
    """

    max_deliveries: int               # deliveries before a message is dead-lettered; 0 = never
    backoff_base_ms: int              # first retry delay after a nack or an expired lease
    backoff_max_ms: int               # cap of the exponential retry delay
    max_in_flight_per_group: int      # fair ordering: leased messages per group at once; 0 = unlimited
    idempotency_window_ms: int        # how long an idempotency key is remembered
    dead_letter_topic: str = ""
    dead_letter_of: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict) -> "QueueConfig":
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})

    def validate(self) -> "QueueConfig":
        """InvalidArgument unless every value is in range."""
        for name in ("max_deliveries", "backoff_base_ms", "backoff_max_ms", "max_in_flight_per_group",
                     "idempotency_window_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise errors.InvalidArgument(f"queue option {name} must be an integer >= 0, not {value!r}")
        if self.backoff_max_ms < self.backoff_base_ms:
            raise errors.InvalidArgument("backoff_max_ms must be >= backoff_base_ms")
        return self


# ---------------------------------------------------------------------- compacted stream topics
DELETE, COMPACT, COMPACT_DELETE = "delete", "compact", "compact,delete"
CLEANUP_POLICIES = (DELETE, COMPACT, COMPACT_DELETE)
LAG_UNBOUNDED_MS = 2**63 - 1  # Kafka's Long.MAX_VALUE: max_compaction_lag_ms that bounds nothing
COMPACTION_OPTIONS = ("cleanup_policy", "min_compaction_lag_ms", "max_compaction_lag_ms", "delete_retention_ms",
                      "segment_bytes")


@dataclass(frozen=True)
class CompactionConfig:
    """How a stream topic's partitions are cleaned (docs/compaction.md): `delete` (retention by time and size),
    `compact` (the latest record per key kept, older ones removed) or `compact,delete` (both).

    A record is removed by compaction only once its batch was appended at least `min_compaction_lag_ms` ago and
    a later record of its key exists; a tombstone (a key with a null value) that is its key's latest record is
    removed `delete_retention_ms` after it was appended. A pass over a partition starts once `segment_bytes` were
    appended since the last one, or when the oldest record appended since then is `max_compaction_lag_ms` old."""

    cleanup_policy: str = DELETE
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LAG_UNBOUNDED_MS
    delete_retention_ms: int = 24 * 3600 * 1000
    segment_bytes: int = 16 * 1024 * 1024

    @property
    def compacted(self) -> bool:
        return self.cleanup_policy in (COMPACT, COMPACT_DELETE)

    @property
    def deletes(self) -> bool:
        """Whether retention by time and size applies."""
        return self.cleanup_policy in (DELETE, COMPACT_DELETE)

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict | None) -> "CompactionConfig":
        if not data:
            return cls()
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})

    def validate(self) -> "CompactionConfig":
        """InvalidArgument unless every value is in range."""
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise errors.InvalidArgument(f"cleanup_policy is one of {', '.join(CLEANUP_POLICIES)}, "
                                         f"not {self.cleanup_policy!r}")
        for name in COMPACTION_OPTIONS[1:]:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise errors.InvalidArgument(f"{name} must be an integer >= 0, not {value!r}")
        if self.segment_bytes < 1:
            raise errors.InvalidArgument("segment_bytes must be at least 1")
        if self.max_compaction_lag_ms < self.min_compaction_lag_ms:
            raise errors.InvalidArgument("max_compaction_lag_ms must be >= min_compaction_lag_ms")
        return self


CREATE_TIME, LOG_APPEND_TIME = "CreateTime", "LogAppendTime"
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)


def dead_letter_name(topic: str) -> str:
    return topic + DEAD_LETTER_SUFFIX


@dataclass(frozen=True)
class Topic:
    name: str
    topic_id: int
    kind: str
    ordering: str
    retention_ms: int
    retention_bytes: int
    created_ms: int
    partitions: tuple[PartitionPlacement, ...]
    queue: QueueConfig | None = None  # queue topics only
    timestamp_type: str = "CreateTime"  # stream topics: CreateTime (the producer's) or LogAppendTime (the leader's)
    compaction: CompactionConfig = CompactionConfig()  # stream topics: cleanup policy and compaction knobs

    def to_dict(self) -> dict:
        data = {
            "name": self.name, "topic_id": self.topic_id, "kind": self.kind, "ordering": self.ordering,
            "retention_ms": self.retention_ms, "retention_bytes": self.retention_bytes,
            "created_ms": self.created_ms, "partitions": [p.to_dict() for p in self.partitions],
        }
        if self.queue is not None:
            data["queue"] = self.queue.to_dict()
        if self.timestamp_type != CREATE_TIME:
            data["timestamp_type"] = self.timestamp_type
        if self.compaction != CompactionConfig():
            data["compaction"] = self.compaction.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Topic":
        return cls(
            name=data["name"], topic_id=int(data["topic_id"]), kind=data["kind"], ordering=data["ordering"],
            retention_ms=int(data["retention_ms"]), retention_bytes=int(data["retention_bytes"]),
            created_ms=int(data["created_ms"]),
            partitions=tuple(PartitionPlacement.from_dict(p) for p in data["partitions"]),
            queue=QueueConfig.from_dict(data["queue"]) if data.get("queue") else None,
            timestamp_type=data.get("timestamp_type", CREATE_TIME),
            compaction=CompactionConfig.from_dict(data.get("compaction")),
        )


@dataclass(frozen=True)
class Broker:
    broker_id: int
    address: str
    raft_address: str
    registered_ms: int
    state: str = "active"  # BROKER_STATES: a draining broker hands its leaderships away and is not given any
    metrics_url: str = ""  # where its Prometheus metrics are served; "" = off
    kafka_address: str = ""  # host:port of its Kafka port; "" = off

    def to_dict(self) -> dict:
        data = {"broker_id": self.broker_id, "address": self.address, "raft_address": self.raft_address,
                "registered_ms": self.registered_ms, "state": self.state, "metrics_url": self.metrics_url}
        if self.kafka_address:
            data["kafka_address"] = self.kafka_address
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Broker":
        return cls(broker_id=int(data["broker_id"]), address=data["address"], raft_address=data["raft_address"],
                   registered_ms=int(data["registered_ms"]), state=data.get("state", "active"),
                   metrics_url=str(data.get("metrics_url", "")), kafka_address=str(data.get("kafka_address", "")))

    @property
    def draining(self) -> bool:
        """Draining, or being decommissioned: it hands its leaderships away and is given none."""
        return self.state in (DRAINING, DECOMMISSIONING)

    @property
    def placeable(self) -> bool:
        """Whether new replicas may be placed on it (not while it is being decommissioned)."""
        return self.state != DECOMMISSIONING


ACTIVE, DRAINING, DECOMMISSIONING = "active", "draining", "decommissioning"
BROKER_STATES = (ACTIVE, DRAINING, DECOMMISSIONING)


def validate_topic_name(name) -> None:
    """InvalidName unless name is 1..249 characters of [A-Za-z0-9._-] and not "." or ".."."""
    if not isinstance(name, str) or not 1 <= len(name) <= TOPIC_NAME_BYTES_MAX:
        raise errors.InvalidName(f"a topic name has 1 to {TOPIC_NAME_BYTES_MAX} characters")
    if name in (".", "..") or not _TOPIC_NAME.fullmatch(name):
        raise errors.InvalidName(f"topic name {name!r} may only use A-Z, a-z, 0-9, '.', '_', '-' "
                                 "and is not '.' or '..'")


def replication_factor_problem(replication_factor: int, brokers: int) -> str:
    """Why a replication factor does not fit a cluster of `brokers` brokers (one wording wherever it is checked)."""
    if replication_factor < 1:
        return f"replication factor {replication_factor} must be at least 1"
    return (f"replication factor {replication_factor} needs {replication_factor} brokers; the cluster has {brokers} "
            f"(give a factor from 1 to {brokers})")


def place_partitions(topic_id: int, first_partition: int, count: int, replication_factor: int,
                     broker_ids) -> tuple[PartitionPlacement, ...]:
    """Deterministic placement: sorted broker ids rotated by (topic_id + partition), so leaders spread out."""
    ids = sorted(set(broker_ids))
    n = len(ids)
    if not 1 <= replication_factor <= n:
        raise errors.InvalidReplicationFactor(replication_factor_problem(replication_factor, n))
    placements = []
    for partition in range(first_partition, first_partition + count):
        start = (topic_id + partition) % n
        placements.append(PartitionPlacement(partition, tuple(ids[(start + i) % n] for i in range(replication_factor))))
    return tuple(placements)


@dataclass(frozen=True)
class CountLimits:
    """How many topics, partitions and per-broker replicas a cluster may hold (settings `topics_max`,
    `cluster_partitions_max`, `broker_replicas_max`). The controller stamps them into create and alter commands;
    the metadata state machine refuses a change that would exceed them, so every replica decides alike."""

    topics_max: int
    cluster_partitions_max: int
    broker_replicas_max: int

    @classmethod
    def from_command(cls, fields) -> "CountLimits | None":
        if fields is None:
            return None
        if not isinstance(fields, dict) or not all(isinstance(fields.get(n), int) for n in _LIMIT_NAMES):
            raise errors.InvalidArgument(f"limits need integer {', '.join(_LIMIT_NAMES)}")
        return cls(*(fields[n] for n in _LIMIT_NAMES))

    def to_command(self) -> dict:
        return {n: getattr(self, n) for n in _LIMIT_NAMES}

    def check(self, topics) -> None:
        """LimitReached when the topics (name -> Topic, after the change) exceed any count."""
        if len(topics) > self.topics_max:
            raise errors.LimitReached(f"the cluster would hold {len(topics)} topics; topics_max={self.topics_max}")
        partitions = sum(len(t.partitions) for t in topics.values())
        if partitions > self.cluster_partitions_max:
            raise errors.LimitReached(f"the cluster would hold {partitions} partitions; "
                                      f"cluster_partitions_max={self.cluster_partitions_max}")
        replicas = Counter(b for t in topics.values() for p in t.partitions for b in p.replicas)
        busiest = max(replicas.items(), key=lambda item: item[1], default=None)
        if busiest is not None and busiest[1] > self.broker_replicas_max:
            raise errors.LimitReached(f"broker {busiest[0]} would host {busiest[1]} partition replicas; "
                                      f"broker_replicas_max={self.broker_replicas_max}")


_LIMIT_NAMES = ("topics_max", "cluster_partitions_max", "broker_replicas_max")
