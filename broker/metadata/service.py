"""Topics and cluster metadata: the rules, independent of gRPC."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from raftbus.client import errors

from raftbus.broker import commands, model
from raftbus.broker.context import BrokerContext, partition_group_id, wait_result
from raftbus.broker.metadata.settings import TopicSettings
from raftbus.broker.queues.config import check_altered_options, resolve_queue_options
from raftbus.broker.queues.settings import QueueSettings


@dataclass(frozen=True)
class PartitionView:
    partition: int
    leader_id: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start_offset: int = -1
    high_watermark: int = -1


@dataclass(frozen=True)
class TopicView:
    topic: object  # model.Topic
    partitions: tuple[PartitionView, ...]


@dataclass(frozen=True)
class ClusterView:
    brokers: tuple  # (model.Broker, alive)
    controller_id: int | None
    topics: tuple[TopicView, ...]
    answering_broker_id: int


class AdminService:
    def __init__(self, context: BrokerContext, settings: TopicSettings, queue_settings: QueueSettings,
                 process_stats: Callable[[], dict] = dict, cluster_id: str = ""):
        self.context = context
        self.cluster_id = cluster_id  # the node's cluster_id setting, in cluster status (who answers at a port)
        self.settings = settings
        self.queue_settings = queue_settings
        self._process_stats = process_stats  # this process's resource use (broker/process_stats.py)

    # ------------------------------------------------------------------ writes (controller only)
    def create_topic(self, name: str, *, partitions: int | None = None, replication_factor: int | None = None,
                     kind: str = "",
                     ordering: str = "", retention_ms: int | None = None, retention_bytes: int | None = None,
                     compaction: dict | None = None, **queue_options):
        """Create a topic; a queue topic takes `queue_options` (see queue_config.OPTIONS) and gets `<name>.dlq`;
        a stream topic takes `compaction` options (model.COMPACTION_OPTIONS; unset ones keep their defaults)."""
        s = self.settings
        partitions = s.default_partitions if partitions is None else partitions
        replication_factor = s.default_replication_factor if replication_factor is None else replication_factor
        kind = kind or "stream"
        if self.context.metadata_sm.topic(name) is not None:  # the mistake first, before its arguments' (re-checked
            raise errors.TopicExists(f"topic {name!r} already exists")  # by the state machine when it applies)
        if kind != "queue" and ordering:
            raise errors.WrongTopicKind.queue_only(["ordering"], name, kind)
        ordering = ordering or ("priority" if kind == "queue" else "")
        retention_ms = s.default_retention_ms if retention_ms is None else retention_ms
        retention_bytes = s.default_retention_bytes if retention_bytes is None else retention_bytes
        model.validate_topic_name(name)
        if kind not in ("stream", "queue"):
            raise errors.InvalidArgument(f"kind must be stream or queue, not {kind!r}")
        if kind == "queue" and ordering not in ("priority", "fair"):
            raise errors.InvalidArgument(f"ordering must be priority or fair, not {ordering!r}")
        if not 1 <= partitions <= s.partitions_per_topic_max:
            raise errors.InvalidPartitions(
                f"partitions must be between 1 and partitions_per_topic_max={s.partitions_per_topic_max}")
        if retention_ms < -1 or retention_bytes < -1:
            raise errors.InvalidArgument("retention_ms and retention_bytes must be >= 0, or -1 for unlimited")
        brokers = len(self.context.metadata_sm.brokers())
        if not 1 <= replication_factor <= max(brokers, 1):
            raise errors.InvalidReplicationFactor(model.replication_factor_problem(replication_factor, brokers))
        queue = resolve_queue_options(self.queue_settings, kind, **queue_options)
        compaction = _compaction_options(compaction, kind, name)
        self.context.require_controller()
        command = commands.encode_create_topic(
            name=name, kind=kind, ordering=ordering, partitions=partitions, replication_factor=replication_factor,
            retention_ms=retention_ms, retention_bytes=retention_bytes, now_ms=self.context.clock.now_ms(),
            queue=queue, limits=self._limits(), compaction=compaction)
        topic = wait_result(self.context.metadata_group.submit(command), self.context.commit_timeout_s)
        return self.describe_topic(topic.name, topic=topic)

    def delete_topic(self, name: str) -> None:
        self.context.require_controller()
        self.context.topic(name)
        command = commands.encode_delete_topic(name=name, now_ms=self.context.clock.now_ms())
        wait_result(self.context.metadata_group.submit(command), self.context.commit_timeout_s)

    def alter_partitions(self, name: str, partitions: int):
        self.context.require_controller()
        self.context.topic(name)
        if partitions > self.settings.partitions_per_topic_max:
            raise errors.InvalidPartitions(
                f"partitions must be at most partitions_per_topic_max={self.settings.partitions_per_topic_max}")
        command = commands.encode_alter_partitions(name=name, partitions=partitions,
                                                   now_ms=self.context.clock.now_ms(), limits=self._limits())
        topic = wait_result(self.context.metadata_group.submit(command), self.context.commit_timeout_s)
        return self.describe_topic(topic.name, topic=topic)

    def alter_topic(self, name: str, *, retention_ms: int | None = None, retention_bytes: int | None = None,
                    timestamp_type: str | None = None, compaction: dict | None = None, **queue_options):
        """Change a topic's retention, a stream topic's timestamp type (CreateTime or LogAppendTime, what the
        Kafka port stamps) and compaction options, and a queue topic's queue options (None = unchanged)."""
        self.context.require_controller()
        topic = self.context.topic(name)
        changes = check_altered_options(self.queue_settings, **queue_options)
        if compaction:
            merged = model.CompactionConfig.from_dict({**topic.compaction.to_dict(), **compaction})
            _compaction_options(merged.to_dict(), topic.kind, name)
            changes.update(compaction)
        if timestamp_type is not None:
            if timestamp_type not in model.TIMESTAMP_TYPES:
                raise errors.InvalidArgument(f"timestamp_type is one of {model.TIMESTAMP_TYPES}")
            changes["timestamp_type"] = timestamp_type
        for field, value in (("retention_ms", retention_ms), ("retention_bytes", retention_bytes)):
            if value is not None:
                if value < -1:
                    raise errors.InvalidArgument(f"{field} must be >= 0, or -1 for unlimited")
                changes[field] = value
        if not changes:
            raise errors.InvalidArgument("alter a topic's retention_ms, retention_bytes, compaction or queue options")
        command = commands.encode_alter_topic(name=name, changes=changes, now_ms=self.context.clock.now_ms())
        topic = wait_result(self.context.metadata_group.submit(command), self.context.commit_timeout_s)
        return self.describe_topic(topic.name, topic=topic)

    def set_broker_state(self, broker_id: int, state: str):
        """Mark a broker draining (it hands every leadership away and is given none) or active again."""
        self.context.require_controller()
        command = commands.encode_set_broker_state(broker_id=broker_id, state=state,
                                                   now_ms=self.context.clock.now_ms())
        return wait_result(self.context.metadata_group.submit(command), self.context.commit_timeout_s)

    def _limits(self) -> dict:
        s = self.settings
        return model.CountLimits(s.topics_max, s.cluster_partitions_max, s.broker_replicas_max).to_command()

    def register_broker(self, broker_id: int, address: str, raft_address: str, metrics_url: str = "",
                        kafka_address: str = "") -> None:
        command = commands.encode_register_broker(broker_id=broker_id, address=address, raft_address=raft_address,
                                                  now_ms=self.context.clock.now_ms(), metrics_url=metrics_url,
                                                  kafka_address=kafka_address)
        wait_result(self.context.metadata_group.submit(command), self.context.commit_timeout_s)

    # ------------------------------------------------------------------ reads (any broker)
    def list_topics(self) -> list[TopicView]:
        topics = self.context.metadata_sm.topics()
        return [self.describe_topic(name, topic=topics[name]) for name in sorted(topics)]

    def describe_topic(self, name: str, *, topic=None) -> TopicView:
        topic = topic or self.context.topic(name)
        views = []
        for placement in topic.partitions:
            group_id = partition_group_id(topic.topic_id, placement.partition)
            log_start = high_watermark = -1
            replica = self.context.partitions.get(group_id)
            if replica is not None and topic.kind == "stream":
                log_start, high_watermark = replica.state_machine.offsets()
            views.append(PartitionView(
                partition=placement.partition,
                leader_id=self.context.leader_of(group_id),
                replicas=tuple(placement.replicas),
                isr=tuple(self.context.isr_of(group_id)),
                log_start_offset=log_start,
                high_watermark=high_watermark,
            ))
        return TopicView(topic=topic, partitions=tuple(views))

    def broker_stats(self) -> dict:
        """This broker's resource use and group-commit durability window (see BrokerStatsResponse)."""
        return {"broker_id": self.context.node_id, **self._process_stats()}

    def cluster(self, topic_names=()) -> ClusterView:
        self.context.require_running()
        alive = self.context.alive_brokers()
        brokers = self.context.metadata_sm.brokers()
        topics = self.context.metadata_sm.topics()
        wanted = topic_names or sorted(topics)
        views = []
        for name in wanted:
            if name in topics:
                views.append(self.describe_topic(name, topic=topics[name]))
        return ClusterView(
            brokers=tuple((brokers[b], b in alive) for b in sorted(brokers)),
            controller_id=self.context.controller_id(),
            topics=tuple(views),
            answering_broker_id=self.context.node_id,
        )


def _compaction_options(options: dict | None, kind: str, name: str) -> dict | None:
    """The compaction options given (None or {}: the defaults), checked: InvalidArgument for an unknown option or a
    value out of range, WrongTopicKind on a queue topic."""
    if not options:
        return None
    unknown = set(options) - set(model.COMPACTION_OPTIONS)
    if unknown:
        raise errors.InvalidArgument(f"unknown compaction options {sorted(unknown)}; they are "
                                     f"{', '.join(model.COMPACTION_OPTIONS)}")
    config = model.CompactionConfig.from_dict(options).validate()
    if kind != "stream" and config != model.CompactionConfig():
        raise errors.WrongTopicKind(f"only stream topics take a cleanup policy or compaction options; {name!r} is "
                                    f"a {kind} topic")
    return dict(options)
