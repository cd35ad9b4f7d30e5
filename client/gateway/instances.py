"""Consumer instances: consumer-group members that the gateway holds for HTTP clients (Kafka REST proxy v2 style).

An HTTP client creates an instance in a group (getting an instance id), subscribes it to topics, polls it for
records and commits; deleting the instance makes its member leave the group. Each instance wraps one SDK
Consumer, used by one request at a time. The member joins the group on the instance's first poll, as an SDK
Consumer does. An instance lives on the gateway process that created it: behind a load balancer, its requests
must reach that process (route on the instance path). An instance unused for `idle_ms` leaves its group and is
dropped, so a client that vanished does not hold partitions forever.

An instance belongs to the principal that created it and acts with the credentials of that request (its token):
requests of another principal do not see it (UNKNOWN_MEMBER). The gateway holds at most `instances_max`
instances, and `instances_per_principal_max` of one principal. Instances live apart from the per-token client
sets (client_sets.py), so closing a client set never drops an instance.
"""
from __future__ import annotations

import re
import threading
import time
import uuid
from dataclasses import dataclass, field

from raftbus.client import Consumer, ConsumerRecords, TopicPartition
from raftbus.client.errors import GroupLimitReached, InvalidArgument, RaftbusError, UnknownMember

from raftbus.gateway import settings

INSTANCE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


@dataclass(frozen=True)
class InstanceOptions:
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = False
    session_timeout_ms: int | None = None
    max_poll_records: int | None = None


@dataclass
class ConsumerInstance:
    group: str
    instance_id: str
    options: InstanceOptions
    last_used_s: float
    principal: str = ""
    credentials: dict | None = None  # the SDK's tls_ca, tls_cert, tls_key, token; None: the environment's
    consumer: Consumer | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def subscribed(self) -> Consumer:
        if self.consumer is None:
            raise InvalidArgument(f"consumer instance {self.instance_id!r} has no subscription yet: "
                                  "POST .../subscription first")
        return self.consumer

    def close(self) -> None:
        if self.consumer is not None:
            consumer, self.consumer = self.consumer, None
            consumer.close()


class ConsumerInstances:
    """The consumer instances of one gateway process, by (group, instance id)."""

    def __init__(self, bootstrap: str, *, idle_ms: int = settings.CONSUMER_INSTANCE_IDLE_MS,
                 check_ms: int = settings.CONSUMER_INSTANCE_CHECK_MS,
                 instances_max: int = settings.CONSUMER_INSTANCES_MAX,
                 instances_per_principal_max: int = settings.CONSUMER_INSTANCES_PER_PRINCIPAL_MAX):
        self.bootstrap = bootstrap
        self.idle_s = idle_ms / 1000
        self.instances_max = instances_max
        self.instances_per_principal_max = instances_per_principal_max
        self._instances: dict[tuple[str, str], ConsumerInstance] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._reaper = threading.Thread(target=self._reap, args=(check_ms / 1000,), daemon=True,
                                        name="raftbus-http-instance-reaper")
        self._reaper.start()

    def create(self, group: str, name: str | None, options: InstanceOptions, *, principal: str = "",
               credentials: dict | None = None) -> ConsumerInstance:
        """A new instance of `principal`, whose member will act with `credentials` (None: the environment's)."""
        instance_id = name or uuid.uuid4().hex
        if not INSTANCE_NAME.match(instance_id):
            raise InvalidArgument(f"instance name must match {INSTANCE_NAME.pattern}, not {instance_id!r}")
        if options.auto_offset_reset not in ("earliest", "latest"):
            raise InvalidArgument(f"auto_offset_reset must be 'earliest' or 'latest', "
                                  f"not {options.auto_offset_reset!r}")
        with self._lock:
            if (group, instance_id) in self._instances:
                raise InvalidArgument(f"consumer instance {instance_id!r} already exists in group {group!r}")
            if len(self._instances) >= self.instances_max:
                raise GroupLimitReached(f"this gateway holds consumer_instances_max={self.instances_max} instances")
            owned = sum(1 for i in self._instances.values() if i.principal == principal)
            if owned >= self.instances_per_principal_max:
                raise GroupLimitReached(f"principal {principal!r} holds consumer_instances_per_principal_max="
                                        f"{self.instances_per_principal_max} instances on this gateway")
            instance = ConsumerInstance(group, instance_id, options, time.monotonic(), principal, credentials)
            self._instances[(group, instance_id)] = instance
        return instance

    def get(self, group: str, instance_id: str, principal: str = "") -> ConsumerInstance:
        """The instance, if `principal` owns it (another principal's is as unknown as a missing one)."""
        with self._lock:
            instance = self._instances.get((group, instance_id))
        if instance is None or instance.principal != principal:
            raise UnknownMember(f"no consumer instance {instance_id!r} in group {group!r} on this gateway "
                                "(never created, deleted, or dropped after being idle)")
        instance.last_used_s = time.monotonic()
        return instance

    def subscribe(self, instance: ConsumerInstance, topics: list[str]) -> None:
        """A new member for `topics` (an earlier subscription's member leaves first)."""
        with instance.lock:
            instance.close()
            optional = {name: value for name, value in (("session_timeout_ms", instance.options.session_timeout_ms),
                                                        ("max_poll_records", instance.options.max_poll_records))
                        if value is not None}
            instance.consumer = Consumer(self.bootstrap, group=instance.group, topics=topics,
                                         auto_offset_reset=instance.options.auto_offset_reset,
                                         enable_auto_commit=instance.options.enable_auto_commit,
                                         client_id=f"http:{instance.instance_id}", **optional,
                                         **(instance.credentials or {}))

    def poll(self, instance: ConsumerInstance, timeout_ms: int, max_records: int) -> ConsumerRecords:
        with instance.lock:
            return instance.subscribed().poll(timeout_s=timeout_ms / 1000, max_records=max_records)

    def commit(self, instance: ConsumerInstance, offsets: dict[TopicPartition, int] | None) -> dict:
        with instance.lock:
            return instance.subscribed().commit(offsets)

    def seek(self, instance: ConsumerInstance, offsets: dict[TopicPartition, int]) -> None:
        with instance.lock:
            consumer = instance.subscribed()
            for tp, offset in offsets.items():
                consumer.seek(tp, offset)

    def seek_to_edge(self, instance: ConsumerInstance, edge: str, partitions: list[TopicPartition] | None) -> None:
        """Seek to the log start ("beginning") or the high watermark ("end")."""
        with instance.lock:
            consumer = instance.subscribed()
            seek = consumer.seek_to_beginning if edge == "beginning" else consumer.seek_to_end
            seek(partitions)

    def assignment(self, instance: ConsumerInstance) -> set[TopicPartition]:
        with instance.lock:
            return instance.subscribed().assignment()

    def delete(self, group: str, instance_id: str, principal: str = "") -> None:
        """The instance's member leaves its group (committing first with auto-commit) and the instance is gone."""
        instance = self.get(group, instance_id, principal)
        with self._lock:
            self._instances.pop((group, instance_id), None)
        with instance.lock:
            instance.close()

    def _reap(self, interval_s: float) -> None:
        while not self._stopping.wait(interval_s):
            now_s = time.monotonic()
            with self._lock:
                idle = [(*key, i.principal) for key, i in self._instances.items()
                        if now_s - i.last_used_s > self.idle_s]
            for group, instance_id, principal in idle:
                try:
                    self.delete(group, instance_id, principal)
                except RaftbusError:
                    pass  # already deleted by a request, or the leave failed: the session expires on the brokers

    def close(self) -> None:
        self._stopping.set()
        with self._lock:
            instances, self._instances = list(self._instances.values()), {}
        for instance in instances:
            with instance.lock:
                try:
                    instance.close()
                except RaftbusError:
                    pass
