"""A broker assembled as broker/server.py assembles it, over in-process replication, memory stores and a manual clock.

`InProcessBroker` calls the server's own `assemble` (every feature with its settings section, the replica set,
their tasks, threads, servicers and listeners on a registry) and hands it in-process parts where a broker has Raft
and files: `InProcessGroup`s over `MemoryStore`s, opened at once on the caller's thread, and a loop that applies on
the caller's thread and runs the periodic tasks when a test calls `run_tasks()`. No Raft, no gRPC, no processes.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

from raftbus.broker import commands
from raftbus.broker.clock import ManualClock
from raftbus.broker.context import METADATA_GROUP, BrokerContext, PartitionReplica
from raftbus.broker.heap import FrozenHeap
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.raft.disk import DiskSpace
from raftbus.broker.raft.faults import FaultWatch
from raftbus.broker.raft.group_commit import GroupCommit
from raftbus.broker.raft.inprocess import InProcessGroup
from raftbus.broker.raft.configuration import Membership
from raftbus.broker.registry import Registry
from raftbus.broker.replicas import state_machine_of, tables_of
from raftbus.broker.assembly import assemble
from raftbus.broker.settings import BrokerSettings
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client.records import encode_batch

PRODUCER = b"p" * 16


class MetadataGroup(InProcessGroup):
    """The in-process metadata group, with the configuration the membership tasks read: this broker votes alone."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.membership = Membership.of([self._self_id])

    def learner_progress(self) -> dict[int, int]:
        return {}


class InProcessLoop:
    """What the assembly uses of a RaftLoop, on the caller's thread: the groups, the listeners of applied commands
    and leadership changes, and the periodic tasks, run by `run_due` on the manual clock as the loop runs them."""

    def __init__(self, clock: ManualClock):
        self.clock = clock
        self.groups: dict[str, object] = {}
        self.quiescence = None
        self.applied_listeners: list = []
        self.leadership_listeners: list = []
        self._periodic: list[list] = []  # [interval_ms, next due (ms), fn]

    def every(self, interval_ms: int, fn) -> None:
        self._periodic.append([interval_ms, 0, fn])

    def run_due(self) -> list[str]:
        now = self.clock.monotonic_ms()
        ran = []
        for entry in self._periodic:
            interval, due, fn = entry
            if now >= due:
                entry[1] = now + interval
                fn()
                ran.append(fn.__name__)
        return ran

    def add_group(self, group) -> None:
        self.groups[group.group_id] = group
        group.listeners.append(self.on_applied)

    def on_applied(self, group) -> None:
        for listener in self.applied_listeners:
            listener(group)

    def on_leadership_changed(self, group) -> None:
        for listener in self.leadership_listeners:
            listener(group)

    def remove_group(self, group_id: str):
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.close()
        return group

    def call_soon(self, fn) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)
        return future

    def call(self, fn, timeout_s: float = 30.0):
        return fn()


class AtOnce:
    """The replica opener of an in-process broker: it opens on the caller's thread."""

    def submit(self, fn, *args) -> None:
        fn(*args)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


class OpenWhenTold:
    """A replica opener that opens only when a test says so (`run`): a slow opener thread."""

    def __init__(self):
        self.pending: list = []

    def submit(self, fn, *args) -> None:
        self.pending.append((fn, args))

    def run(self) -> None:
        pending, self.pending = self.pending, []
        for fn, args in pending:
            fn(*args)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


class MemoryReplicas:
    """Partition replicas in memory: a MemoryStore and an InProcessGroup led by this broker."""

    def __init__(self, node_id: int):
        self.node_id = node_id
        self.deleted: list[str] = []

    def open(self, group_id: str, topic, placement):
        store = MemoryStore(tables_of(topic))
        sm = state_machine_of(topic, store)
        return sm, store, InProcessGroup(group_id, sm, store, self_id=self.node_id)

    def starting(self, group) -> None:
        pass

    def delete(self, group_id: str) -> None:
        self.deleted.append(group_id)


class InProcessBroker:
    """Broker `node_id` as the server assembles it; every replica placed here is opened here and led here."""

    def __init__(self, node_id: int = 1, *, clock: ManualClock | None = None, metadata_group_type=MetadataGroup,
                 opener=None, process_stats=dict, **settings):
        self.clock = clock or ManualClock()
        # the test process's heap is not the broker's to freeze: no heap freeze task unless a test asks for one
        self.settings = BrokerSettings.from_keys(**{"gc_freeze_interval_ms": 0, **settings, "node_id": node_id})
        self.metadata_sm = MetadataStateMachine(MemoryStore(MetadataStateMachine.TABLES))
        self.metadata_group = metadata_group_type(METADATA_GROUP, self.metadata_sm, self_id=node_id)
        self.loop = InProcessLoop(self.clock)
        self.context = BrokerContext(node_id=node_id, clock=self.clock, metadata_sm=self.metadata_sm,
                                     metadata_group=self.metadata_group,
                                     commit_timeout_ms=self.settings.log.produce_timeout_ms, run_on_loop=self.loop.call)
        self.registry = Registry()
        self.files = MemoryReplicas(node_id)
        self.faults = FaultWatch(DiskSpace(".", 0), self.loop.groups, broker_group=METADATA_GROUP)
        self.stopping = threading.Event()
        storage = self.settings.storage
        self.features, self.replicas = assemble(
            self.settings, self.registry, self.context, self.files, loop=self.loop, opener=opener or AtOnce(),
            faults=self.faults, heap=FrozenHeap(storage.gc_drops_collect_fraction),
            group_commit=GroupCommit(storage.storage_sync_interval_ms), stopping=self.stopping,
            bounded_start=False,  # in-process groups never quiesce: nothing to wait for
            data_dir=Path(self.settings.node.data_dir), process_stats=process_stats)
        self.loop.add_group(self.metadata_group)
        self.registry.install(self.loop)

    # ------------------------------------------------------------------ the services, by the names tests use
    @property
    def admin(self):
        return self.features.metadata.admin

    @property
    def log(self):
        return self.features.log.service

    @property
    def groups(self):
        return self.features.groups.service

    @property
    def offsets(self):
        return self.features.groups.offsets

    @property
    def queues(self):
        return self.features.queues.service

    @property
    def dead_letters(self):
        return self.features.queues.dead_letters

    @property
    def security(self):
        return self.features.security

    def servicers(self) -> list:
        """Every (add_to_server, servicer) pair the broker serves on its client port."""
        return self.registry.servicers

    # ------------------------------------------------------------------ driving it
    def reconcile(self) -> None:
        """Open the replicas the metadata places here and drop the others, as the server's replica set does."""
        self.replicas.reconcile()

    def run_tasks(self) -> list[str]:
        """Run the periodic tasks whose time has come on the manual clock; their names."""
        return self.loop.run_due()


class ServiceBroker(InProcessBroker):
    """Broker `node_id` of a cluster whose other brokers exist only in the metadata."""

    def __init__(self, node_id: int = 1, brokers=(1, 2, 3), **settings):
        super().__init__(node_id, **settings)
        for broker_id in brokers:
            self.admin.register_broker(broker_id, f"127.0.0.1:{9000 + broker_id}", f"127.0.0.1:{9100 + broker_id}")

    def create_topic(self, name: str = "orders", **options):
        view = self.admin.create_topic(name, **options)
        self.reconcile()
        return view

    def replica(self, topic: str, partition: int) -> PartitionReplica:
        return self.context.leader_replica(topic, partition)

    def produce(self, topic: str, partition: int, values, *, sequence: int = 0, producer: bytes = PRODUCER,
                timestamp_ms: int | None = None):
        ts = self.clock.now_ms() if timestamp_ms is None else timestamp_ms
        blob, count, max_ts = encode_batch([(ts, None, v, ()) for v in values])
        return self.log.produce(topic, partition, producer_id=producer, base_sequence=sequence, record_count=count,
                                max_timestamp_ms=max_ts, records=blob)


def raw_produce(now_ms: int, values) -> bytes:
    blob, count, max_ts = encode_batch([(now_ms, None, v, ()) for v in values])
    return commands.encode_produce(now_ms, PRODUCER, 0, count, max_ts, blob)
