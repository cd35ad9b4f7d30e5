"""The Admin client: create, describe, alter and delete topics, and read the cluster's status.

Writes go to the controller (the metadata-group leader) through the router, which follows NOT_LEADER hints;
reads are answered by any broker from its replicated metadata. `create_topic` and `alter_partitions` wait by
default until every partition of the topic reports a leader, so a producer can use the topic at once.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import grpc

from raftbus.client import settings
from raftbus.client.errors import LeaderNotAvailable, UnknownPartition
from raftbus.client.groups import admin as group_admin
from raftbus.client.groups.admin import GroupDescription
from raftbus.client.groups.calls import GroupCalls, TopicPartition
from raftbus.client.credentials import TlsSource
from raftbus.client.reader import Reader
from raftbus.client.router import Router
from raftbus.client.cluster_admin import MembershipCalls
from raftbus.client.security import SecurityCalls
from raftbus.client.wire import raftbus_pb2 as pb


def _unset_as_none(value: int) -> int | None:
    """The wire uses 0 for "no leader / no controller"; the SDK says None."""
    return value or None


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    """One partition: its leader (None while an election runs), replicas, in-sync replicas and offsets.

    `log_start_offset` and `high_watermark` are -1 when the answering broker holds no replica of the partition.
    """

    partition: int
    leader_id: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start_offset: int
    high_watermark: int

    @classmethod
    def from_proto(cls, info: pb.PartitionInfo) -> "PartitionDescription":
        return cls(info.partition, _unset_as_none(info.leader_id), tuple(info.replicas), tuple(info.isr),
                   info.log_start_offset, info.high_watermark)

    def to_dict(self) -> dict:
        return {**asdict(self), "replicas": list(self.replicas), "isr": list(self.isr)}


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic and its partitions; retention -1 means unlimited, ordering is "" for stream topics."""

    name: str
    topic_id: int
    kind: str
    ordering: str
    retention_ms: int
    retention_bytes: int
    created_ms: int
    partitions: tuple[PartitionDescription, ...]
    queue: dict | None = None  # queue topics: max_deliveries, backoff_base_ms, ..., dead_letter_topic
    compaction: dict | None = None  # stream topics: cleanup_policy, min_compaction_lag_ms, ... (docs/compaction.md)

    @classmethod
    def from_proto(cls, info: pb.TopicInfo) -> "TopicDescription":
        queue = compaction = None
        if info.HasField("queue"):
            queue = {f.name: getattr(info.queue, f.name) for f in info.queue.DESCRIPTOR.fields}
        if info.HasField("compaction"):
            compaction = {f.name: getattr(info.compaction, f.name) for f in info.compaction.DESCRIPTOR.fields}
        return cls(info.name, info.topic_id, info.kind, info.ordering, info.retention_ms, info.retention_bytes,
                   info.created_ms, tuple(PartitionDescription.from_proto(p) for p in info.partitions), queue,
                   compaction)

    @property
    def cleanup_policy(self) -> str:
        """"delete", "compact" or "compact,delete" ("" for a queue topic)."""
        return self.compaction["cleanup_policy"] if self.compaction else ""

    def to_dict(self) -> dict:
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "partitions"}
        return {**fields, "partitions": [p.to_dict() for p in self.partitions]}

    def leaderless_partitions(self) -> list[int]:
        return [p.partition for p in self.partitions if p.leader_id is None]


@dataclass(frozen=True, slots=True)
class BrokerDescription:
    """A registered broker; `alive` is whether the answering broker is connected to it; `metrics_url` is where
    it serves Prometheus metrics ("" when its metrics_listen is off)."""

    broker_id: int
    address: str
    raft_address: str
    alive: bool
    state: str = "active"  # "draining" or "decommissioning": it hands its leaderships away and is given none
    metrics_url: str = ""
    kafka_address: str = ""  # host:port of its Kafka port ("" when its kafka_listen is off)

    @classmethod
    def from_proto(cls, info: pb.BrokerInfo) -> "BrokerDescription":
        return cls(info.broker_id, info.address, info.raft_address, info.alive, info.state or "active",
                   info.metrics_url, info.kafka_address)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """Brokers, the controller (None while an election runs) and topics, as one broker sees them."""

    brokers: tuple[BrokerDescription, ...]
    controller_id: int | None
    topics: tuple[TopicDescription, ...]
    answering_broker_id: int
    cluster_id: str = ""  # the answering broker's cluster_id ("" from GetMetadata, which does not carry it)

    @classmethod
    def from_proto(cls, response: pb.ClusterStatusResponse | pb.MetadataResponse) -> "ClusterStatus":
        return cls(tuple(BrokerDescription.from_proto(b) for b in response.brokers),
                   _unset_as_none(response.controller_id),
                   tuple(TopicDescription.from_proto(t) for t in response.topics),
                   response.answering_broker_id, getattr(response, "cluster_id", ""))

    def to_dict(self) -> dict:
        return {"brokers": [b.to_dict() for b in self.brokers], "controller_id": self.controller_id,
                "topics": [t.to_dict() for t in self.topics], "answering_broker_id": self.answering_broker_id,
                "cluster_id": self.cluster_id}


@dataclass(frozen=True, slots=True)
class BrokerStats:
    """One broker's own report: resident memory, CPU time, groups, its group-commit durability window
    (ms from the first apply of a round to the end of its fsyncs; -1 before the first round) and its faults."""

    broker_id: int
    rss_bytes: int
    cpu_user_s: float
    cpu_system_s: float
    uptime_s: float
    groups_hosted: int
    groups_led: int
    durability_window_p50_ms: float
    durability_window_p99_ms: float
    durability_window_max_ms: float
    group_commit_rounds: int
    pid: int
    stopped_groups: tuple[str, ...] = ()  # groups that crash-stopped after a storage or fsync failure
    disk_full: bool = False               # below storage_free_bytes_min free: writes get DISK_FULL
    damaged_stores: tuple[str, ...] = ()  # replicas whose store failed its checksum when opened, until rebuilt
    groups_quiesced: int = 0              # groups idle enough to stop ticking and heartbeating
    compaction_passes: int = 0            # compaction of the compacted partitions it led (docs/compaction.md)
    compaction_bytes_scanned: int = 0
    compaction_bytes_removed: int = 0
    compaction_busy_s: float = 0.0
    compaction_key_map_peak_bytes: int = 0
    heap_trims: int = 0                   # free C heap pages returned to the system (malloc_trim_interval_ms)
    heap_trim_busy_s: float = 0.0
    heap_trim_longest_ms: float = 0.0
    heap_trim_returned_bytes: int = 0     # anonymous memory the trims gave back
    raft_log_bytes: int = 0               # Raft log its groups hold in memory now

    @classmethod
    def from_proto(cls, info: pb.BrokerStatsResponse) -> "BrokerStats":
        values = {name: getattr(info, name) for name in cls.__dataclass_fields__}
        values["stopped_groups"] = tuple(values["stopped_groups"])
        values["damaged_stores"] = tuple(values["damaged_stores"])
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)


COMPACTION_OPTIONS = ("cleanup_policy", "min_compaction_lag_ms", "max_compaction_lag_ms", "delete_retention_ms",
                      "segment_bytes")


def create_topic_request(name: str, partitions: int | None, replication_factor: int | None, kind: str,
                         ordering: str | None, retention_ms: int | None, retention_bytes: int | None,
                         **options: int | str | None) -> pb.CreateTopicRequest:
    """The CreateTopic request; None (unset) partitions, replication factor, retention, queue and compaction fields
    mean "the broker's default"; any value given is sent as given, so a bad one is refused, never replaced."""
    optional = {name: value for name, value in options.items() if value is not None}
    if partitions is not None:
        optional["partitions"] = partitions
    if replication_factor is not None:
        optional["replication_factor"] = replication_factor
    if retention_ms is not None:
        optional["retention_ms"] = retention_ms
    if retention_bytes is not None:
        optional["retention_bytes"] = retention_bytes
    return pb.CreateTopicRequest(name=name, kind=kind, ordering=ordering or "", **optional)


class Admin(SecurityCalls, MembershipCalls):
    """Topic and cluster administration, tokens and ACLs (client/security.py), membership and data movement
    (client/cluster_admin.py); a context manager that closes its channels."""

    def __init__(
        self,
        bootstrap: str | list[str] | None = None,
        *,
        request_timeout_ms: int = settings.REQUEST_TIMEOUT_MS,
        connect_timeout_ms: int = settings.CONNECT_TIMEOUT_MS,
        tls_ca: TlsSource = None, tls_cert: TlsSource = None, tls_key: TlsSource = None, token: str | None = None,
        topic_ready_timeout_ms: int = settings.TOPIC_READY_TIMEOUT_MS,
        topic_ready_poll_ms: int = settings.TOPIC_READY_POLL_MS,
        router: Router | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.router = router or Router(bootstrap, request_timeout_ms=request_timeout_ms,
                                       connect_timeout_ms=connect_timeout_ms,
                                       tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token)
        self.request_timeout_s = request_timeout_ms / 1000
        self.topic_ready_timeout_s = topic_ready_timeout_ms / 1000
        self.topic_ready_poll_s = topic_ready_poll_ms / 1000
        self._sleep = sleep
        self._clock = clock

    # ------------------------------------------------------------------ topics

    def create_topic(self, name: str, partitions: int | None = 3, replication_factor: int | None = 3,
                     kind: str = "stream",
                     ordering: str | None = None, retention_ms: int | None = None,
                     retention_bytes: int | None = None, wait: bool = True, *, max_deliveries: int | None = None,
                     backoff_base_ms: int | None = None, backoff_max_ms: int | None = None,
                     max_in_flight_per_group: int | None = None,
                     idempotency_window_ms: int | None = None, cleanup_policy: str | None = None,
                     min_compaction_lag_ms: int | None = None, max_compaction_lag_ms: int | None = None,
                     delete_retention_ms: int | None = None,
                     segment_bytes: int | None = None) -> TopicDescription:
        """Create a topic on the controller; with `wait`, return once every partition has a leader.

        A queue topic (kind="queue", ordering "priority" or "fair") takes the queue options (None: the broker's
        default) and comes with its dead-letter topic `<name>.dlq`, which `wait` also waits for. A stream topic
        takes `cleanup_policy` ("delete", the default, "compact" or "compact,delete") and the compaction knobs
        (docs/compaction.md).
        Raises TopicExists, InvalidName, InvalidPartitions, InvalidReplicationFactor, InvalidArgument, and
        LeaderNotAvailable when partitions still lack a leader after `topic_ready_timeout_ms`.
        """
        request = create_topic_request(name, partitions, replication_factor, kind, ordering, retention_ms,
                                       retention_bytes, max_deliveries=max_deliveries,
                                       backoff_base_ms=backoff_base_ms, backoff_max_ms=backoff_max_ms,
                                       max_in_flight_per_group=max_in_flight_per_group,
                                       idempotency_window_ms=idempotency_window_ms, cleanup_policy=cleanup_policy,
                                       min_compaction_lag_ms=min_compaction_lag_ms,
                                       max_compaction_lag_ms=max_compaction_lag_ms,
                                       delete_retention_ms=delete_retention_ms, segment_bytes=segment_bytes)
        response = self.router.call_controller(
            lambda conn: conn.admin.CreateTopic(request, timeout=self.request_timeout_s))
        created = TopicDescription.from_proto(response.topic)
        if not wait:
            return created
        if created.queue and created.queue.get("dead_letter_topic"):
            self.wait_for_leaders(created.queue["dead_letter_topic"])
        return self.wait_for_leaders(name)

    def create_table(self, name: str, partitions: int | None = 1, replication_factor: int | None = 3, *,
                     wait: bool = True, **compaction_options) -> TopicDescription:
        """Create a key-value table: a compacted stream topic (cleanup_policy "compact" unless given) that
        `raftbus.client.Table` reads by key. `compaction_options` are create_topic's compaction knobs."""
        compaction_options.setdefault("cleanup_policy", "compact")
        return self.create_topic(name, partitions=partitions, replication_factor=replication_factor, wait=wait,
                                 **compaction_options)

    def list_topics(self) -> list[TopicDescription]:
        """Every topic, as the controller knows them (see describe_topic)."""
        response = self.router.call_controller(
            lambda conn: conn.admin.ListTopics(pb.ListTopicsRequest(), timeout=self.request_timeout_s))
        return [TopicDescription.from_proto(t) for t in response.topics]

    def describe_topic(self, name: str) -> TopicDescription:
        """The topic's settings and partitions; UnknownTopic if it does not exist. Asked of the controller, which
        answers a topic change only once it applied it: a change this client (or anyone) saw answered is in the
        description, where another broker's metadata replica may not have applied it yet."""
        response = self.router.call_controller(
            lambda conn: conn.admin.DescribeTopic(pb.DescribeTopicRequest(name=name), timeout=self.request_timeout_s))
        return TopicDescription.from_proto(response)

    def delete_topic(self, name: str) -> None:
        """Delete a topic and all its records; UnknownTopic if it does not exist."""
        self.router.call_controller(
            lambda conn: conn.admin.DeleteTopic(pb.DeleteTopicRequest(name=name), timeout=self.request_timeout_s))

    def alter_partitions(self, name: str, partitions: int, wait: bool = True) -> TopicDescription:
        """Grow a topic to `partitions` in total (InvalidPartitions on a shrink); `wait` as in create_topic."""
        request = pb.AlterPartitionsRequest(name=name, partitions=partitions)
        response = self.router.call_controller(
            lambda conn: conn.admin.AlterPartitions(request, timeout=self.request_timeout_s))
        altered = TopicDescription.from_proto(response)
        return self.wait_for_leaders(name, partitions=len(altered.partitions)) if wait else altered

    def drain_broker(self, broker_id: int, wait: bool = True, timeout_s: float = 60.0,
                     progress: Callable[[int], None] | None = None) -> BrokerDescription:
        """Mark a broker draining: it hands every leadership it holds (partitions and the metadata group) to a
        replica that is not draining, and none is given back to it until `undrain_broker`. With `wait`, return
        once it leads nothing (LeaderNotAvailable after `timeout_s`); `progress` gets the leaderships left."""
        drained = self._set_broker_state(broker_id, "draining")
        if wait:
            self.wait_until_leaderless(broker_id, timeout_s, progress)
        return drained

    def undrain_broker(self, broker_id: int) -> BrokerDescription:
        """Let a drained broker lead again (its preferred partitions move back within a preferred-leader check)."""
        return self._set_broker_state(broker_id, "active")

    def _set_broker_state(self, broker_id: int, state: str) -> BrokerDescription:
        request = pb.SetBrokerStateRequest(broker_id=broker_id, state=state)
        return BrokerDescription.from_proto(self.router.call_controller(
            lambda conn: conn.admin.SetBrokerState(request, timeout=self.request_timeout_s)))

    def leaderships_of(self, broker_id: int) -> int:
        """Partitions this broker leads, plus one if it is the controller (the metadata group's leader)."""
        status = self.cluster_status()
        led = sum(1 for t in status.topics for p in t.partitions if p.leader_id == broker_id)
        return led + (1 if status.controller_id == broker_id else 0)

    def wait_until_leaderless(self, broker_id: int, timeout_s: float,
                              progress: Callable[[int], None] | None = None) -> None:
        deadline = self._clock() + timeout_s
        while True:
            left = self.leaderships_of(broker_id)
            if progress is not None:
                progress(left)
            if left == 0:
                return
            if self._clock() >= deadline:
                raise LeaderNotAvailable(f"broker {broker_id} still leads {left} group(s) after {timeout_s} s")
            self._sleep(self.topic_ready_poll_s)

    def alter_topic(self, name: str, *, retention_ms: int | None = None, retention_bytes: int | None = None,
                    max_deliveries: int | None = None, backoff_base_ms: int | None = None,
                    backoff_max_ms: int | None = None, max_in_flight_per_group: int | None = None,
                    idempotency_window_ms: int | None = None, cleanup_policy: str | None = None,
                    min_compaction_lag_ms: int | None = None, max_compaction_lag_ms: int | None = None,
                    delete_retention_ms: int | None = None, segment_bytes: int | None = None) -> TopicDescription:
        """Change a topic's retention, (stream topics) cleanup policy and compaction knobs and (queue topics) queue
        options; None leaves a setting as it is.
        Raises UnknownTopic, WrongTopicKind (queue options on a stream topic, compaction on a queue topic),
        InvalidArgument."""
        given = dict(retention_ms=retention_ms, retention_bytes=retention_bytes, max_deliveries=max_deliveries,
                     backoff_base_ms=backoff_base_ms, backoff_max_ms=backoff_max_ms,
                     max_in_flight_per_group=max_in_flight_per_group, idempotency_window_ms=idempotency_window_ms,
                     cleanup_policy=cleanup_policy, min_compaction_lag_ms=min_compaction_lag_ms,
                     max_compaction_lag_ms=max_compaction_lag_ms, delete_retention_ms=delete_retention_ms,
                     segment_bytes=segment_bytes)
        request = pb.AlterTopicRequest(name=name, **{k: v for k, v in given.items() if v is not None})
        response = self.router.call_controller(
            lambda conn: conn.admin.AlterTopic(request, timeout=self.request_timeout_s))
        return TopicDescription.from_proto(response)

    def wait_for_leaders(self, name: str, partitions: int = 0) -> TopicDescription:
        """Poll metadata until `name` has at least `partitions` partitions and every one has a leader, bounded by
        topic_ready_timeout_ms: every topic_ready_poll_ms per 100 partitions, at most TOPIC_READY_POLL_MAX_MS apart
        (describing thousands of partitions is work for the broker that answers). The broker that answers may
        hold a metadata replica that has not applied the change yet: its older description is not taken as done."""
        deadline = self._clock() + self.topic_ready_timeout_s
        poll_s = self.topic_ready_poll_s
        while True:
            topics = self.metadata([name]).topics
            topic = next((t for t in topics if t.name == name), None)
            if topic is None:
                missing = ["all"]
            else:
                missing = topic.leaderless_partitions() + list(range(len(topic.partitions), partitions))
            if topic is not None and not missing:
                return topic
            if self._clock() + poll_s > deadline:
                raise LeaderNotAvailable(
                    f"topic {name!r}: partitions {missing} have no leader after {self.topic_ready_timeout_s:g} s")
            if topic is not None:
                hundreds = -(-len(topic.partitions) // 100)
                poll_s = max(self.topic_ready_poll_s,
                             min(hundreds * self.topic_ready_poll_s, settings.TOPIC_READY_POLL_MAX_MS / 1000))
            self._sleep(poll_s)

    # ------------------------------------------------------------------ cluster

    def cluster_status(self) -> ClusterStatus:
        """Brokers, controller and every topic's partition leaders and in-sync replicas."""
        response = self.router.call_any(
            lambda conn: conn.admin.ClusterStatus(pb.ClusterStatusRequest(), timeout=self.request_timeout_s))
        return ClusterStatus.from_proto(response)

    def broker_stats(self) -> list[BrokerStats]:
        """Every reachable registered broker's own BrokerStats, by broker id (unreachable ones are left out)."""
        stats = []
        for broker in self.metadata().brokers:
            try:
                response = self.router.connection(broker.address).admin.BrokerStats(
                    pb.BrokerStatsRequest(), timeout=self.request_timeout_s)
            except grpc.RpcError:
                continue
            stats.append(BrokerStats.from_proto(response))
        return sorted(stats, key=lambda s: s.broker_id)

    def metadata(self, topics: list[str] | None = None) -> ClusterStatus:
        """The routing metadata (brokers, controller, partition leaders) for `topics`, or all topics."""
        request = pb.MetadataRequest(topics=list(topics or ()))
        response = self.router.call_any(lambda conn: conn.admin.GetMetadata(request, timeout=self.request_timeout_s))
        return ClusterStatus.from_proto(response)

    # ------------------------------------------------------------------ consumer groups

    def list_groups(self) -> list[GroupDescription]:
        """Every consumer group with its members and assignment (no offsets: see describe_group)."""
        return group_admin.list_groups(GroupCalls(self.router))

    def describe_group(self, name: str) -> GroupDescription:
        """Members, assignment, committed offsets and lag (records and seconds) per partition; UnknownGroup."""
        return group_admin.describe_group(GroupCalls(self.router), name)

    def reset_group_offsets(self, group: str, topic: str, *, to_earliest: bool = False, to_latest: bool = False,
                            to_offset: int | None = None, to_time_ms: int | None = None,
                            partitions: list[int] | None = None, dry_run: bool = False) -> dict[int, int]:
        """Set the group's committed offsets on `topic` (every partition, or `partitions`) as kafka-consumer-groups
        --reset-offsets does: exactly one of `to_earliest`, `to_latest`, `to_offset` (clamped to each
        partition's log) or `to_time_ms` (the first offset at or after that time). Only while the group has no
        members (GroupNotEmpty); offsets may move backwards. Returns {partition: offset}; `dry_run` only
        resolves them."""
        spec = group_admin.OffsetResetSpec(to_earliest, to_latest, to_offset, to_time_ms)
        spec.check()
        reader = Reader(router=self.router, request_timeout_ms=int(self.request_timeout_s * 1000))
        count = reader.partitions(topic)
        chosen = list(range(count)) if partitions is None else list(partitions)
        for partition in chosen:
            if not isinstance(partition, int) or not 0 <= partition < count:
                raise UnknownPartition(f"topic {topic!r} has no partition {partition} (it has {count})")
        plan = {}
        for partition in chosen:
            log_start, high_watermark = reader.offsets(topic, partition)
            at_time = reader.offset_for_time(topic, partition, to_time_ms) if to_time_ms is not None else None
            plan[partition] = spec.offset_in(log_start, high_watermark, at_time)
        if not dry_run:
            calls = GroupCalls(self.router)
            for partition, offset in plan.items():
                calls.reset_offset(group, TopicPartition(topic, partition), offset)
        return plan

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        self.router.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
