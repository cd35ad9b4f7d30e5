"""What services see of the broker: metadata, the partition replicas hosted here, leaders, settings, clock."""
from __future__ import annotations

import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Callable

from raftbus.client import errors

from raftbus.broker.leaders import LeaderTable

METADATA_GROUP = "meta"


def partition_group_id(topic_id: int, partition: int) -> str:
    return f"p{topic_id}.{partition}"


def replica_plan(topics, node_id: int, hosted) -> tuple[dict, list[str]]:
    """Which partition replicas to open here ({group_id: (topic, placement)}) and which to drop."""
    desired = {}
    for topic in topics:
        for placement in topic.partitions:
            if node_id in placement.hosts:
                desired[partition_group_id(topic.topic_id, placement.partition)] = (topic, placement)
    create = {g: v for g, v in desired.items() if g not in hosted}
    drop = [g for g in hosted if g not in desired]
    return create, drop


@dataclass
class PartitionReplica:
    """One partition replica hosted by this broker: its Raft group, state machine and fetch waiters."""

    topic: str
    topic_id: int
    partition: int
    group: object
    state_machine: object
    store: object
    appended: threading.Condition = field(default_factory=threading.Condition)
    waiters: int = 0
    watchers: set = field(default_factory=set)  # threading.Events of fetches waiting on several partitions

    @property
    def group_id(self) -> str:
        return partition_group_id(self.topic_id, self.partition)

    def notify_appended(self) -> None:
        with self.appended:
            self.appended.notify_all()
            for event in self.watchers:
                event.set()

    def wait_beyond(self, offset: int, timeout_s: float, waiters_max: int) -> None:
        """Block until the high watermark passes `offset` or the timeout ends (a long-poll fetch)."""
        with self.appended:
            if self.waiters >= waiters_max:
                raise errors.Overloaded(f"too many waiting fetches on this partition (fetch_waiters_max={waiters_max})")
            self.waiters += 1
            try:
                self.appended.wait_for(lambda: self.state_machine.offsets()[1] > offset, timeout_s)
            finally:
                self.waiters -= 1


def wait_beyond_any(positions: list[tuple["PartitionReplica", int]], timeout_s: float, waiters_max: int) -> None:
    """Block until one replica's high watermark passes its offset in `positions`, or the timeout ends (a long-poll
    fetch of several partitions). Each replica counts the wait against its `waiters_max`, as wait_beyond does."""
    event = threading.Event()
    watched = []
    try:
        for replica, offset in positions:
            with replica.appended:
                if replica.waiters >= waiters_max:
                    raise errors.Overloaded(f"too many waiting fetches on {replica.topic}/{replica.partition} "
                                            f"(fetch_waiters_max={waiters_max})")
                replica.waiters += 1
                replica.watchers.add(event)
                watched.append(replica)
                if replica.state_machine.offsets()[1] > offset:
                    return  # appended before the watch began
        event.wait(timeout_s)
    finally:
        for replica in watched:
            with replica.appended:
                replica.waiters -= 1
                replica.watchers.discard(event)


def wait_result(future: Future, timeout_s: float):
    """The state machine's result, or the typed error it returned or the group raised."""
    try:
        result = future.result(timeout_s)
    except FutureTimeout:
        raise errors.RequestTimedOut(f"not committed within {timeout_s:.1f} s; retry idempotently") from None
    if isinstance(result, errors.RaftbusError):
        raise result
    return result


class BrokerContext:
    """Built once per broker by the assembly (broker/server.py) and handed to every service."""

    def __init__(self, *, node_id: int, clock, metadata_sm, metadata_group, commit_timeout_ms: int,
                 leaders: LeaderTable | None = None, alive: Callable[[], set[int]] | None = None,
                 run_on_loop: Callable[[Callable[[], object]], object] | None = None,
                 on_store_rebuilt: Callable[[str], None] | None = None):
        self.node_id = node_id
        self.clock = clock
        self.metadata_sm = metadata_sm
        self.metadata_group = metadata_group
        # How long a service waits for a command it proposed to commit (produce_timeout_ms).
        self.commit_timeout_s = commit_timeout_ms / 1000
        self.leaders = leaders or LeaderTable()
        self.partitions: dict[str, PartitionReplica] = {}
        self._alive = alive or (lambda: {node_id})
        self.stopping = threading.Event()  # set by Broker.stop before it hands its groups over
        # Runs fn where commands are applied (the broker's Raft loop thread), so nothing applies meanwhile.
        self.run_on_loop: Callable[[Callable[[], object]], object] = run_on_loop or (lambda fn: fn())
        # Told that a replica's store was replaced by a copy of its leader's (`partitions rebuild`).
        self.on_store_rebuilt: Callable[[str], None] = on_store_rebuilt or (lambda group_id: None)

    def led_partitions(self, kind: str):
        """(replica, topic) of every partition of `kind` ("stream", "queue") this broker leads and has caught up."""
        topics = {t.topic_id: t for t in self.metadata_sm.topics().values()}
        for replica in list(self.partitions.values()):
            topic = topics.get(replica.topic_id)
            if topic is not None and topic.kind == kind and replica.group.caught_up_as_leader:
                yield replica, topic

    # ------------------------------------------------------------------ brokers
    def alive_brokers(self) -> set[int]:
        return set(self._alive()) | {self.node_id}

    def broker_address(self, broker_id: int | None) -> str | None:
        if broker_id is None:
            return None
        broker = self.metadata_sm.brokers().get(broker_id)
        return broker.address if broker is not None else None

    def controller_id(self) -> int | None:
        return self.metadata_group.leader_id

    # ------------------------------------------------------------------ leaders
    def leader_of(self, group_id: str) -> int | None:
        replica = self.partitions.get(group_id)
        if replica is not None and replica.group.leader_id is not None:
            return replica.group.leader_id
        info = self.leaders.get(group_id)
        return info.leader_id if info is not None else None

    def isr_of(self, group_id: str) -> list[int]:
        replica = self.partitions.get(group_id)
        if replica is not None and replica.group.is_leader:
            return replica.group.in_sync_replicas(self.node_id)
        info = self.leaders.get(group_id)
        return list(info.isr) if info is not None else []

    def not_leader(self, leader_id: int | None, what: str) -> errors.RaftbusError:
        if leader_id is None or leader_id == self.node_id:
            return errors.LeaderNotAvailable(f"{what} has no leader right now")
        return errors.NotLeader(f"broker {self.node_id} does not lead {what}", leader_id=leader_id,
                                leader_address=self.broker_address(leader_id))

    # ------------------------------------------------------------------ lookups
    def topic(self, name: str):
        topic = self.metadata_sm.topic(name)
        if topic is None:
            raise errors.UnknownTopic(f"topic {name!r} does not exist")
        return topic

    def leader_replica(self, topic_name: str, partition: int, kind: str | None = None) -> PartitionReplica:
        """The replica of (topic, partition) if this broker leads it; otherwise a typed error with a hint."""
        topic = self.topic(topic_name)
        if kind is not None and topic.kind != kind:
            raise errors.WrongTopicKind(f"topic {topic_name!r} is a {topic.kind} topic, not a {kind} topic")
        if not 0 <= partition < len(topic.partitions):
            raise errors.UnknownPartition(f"topic {topic_name!r} has no partition {partition}")
        group_id = partition_group_id(topic.topic_id, partition)
        self.require_running()
        replica = self.partitions.get(group_id)
        if replica is None or not replica.group.is_leader:
            raise self.not_leader(self.leader_of(group_id), f"partition {topic_name}/{partition}")
        if not replica.group.caught_up_as_leader:
            raise errors.LeaderNotAvailable(f"broker {self.node_id} was just elected leader of partition "
                                            f"{topic_name}/{partition} and is still applying what was committed "
                                            "before; retry")
        return replica

    def require_running(self) -> None:
        """Unavailable once the broker is stopping: it is handing its groups over and its view of who leads what
        is about to go stale, so clients should ask another broker (the router moves on at once)."""
        if self.stopping.is_set():
            raise errors.Unavailable(f"broker {self.node_id} is stopping")

    def require_controller(self) -> None:
        self.require_running()
        if not self.metadata_group.is_leader:
            raise self.not_leader(self.metadata_group.leader_id, "the metadata group")
