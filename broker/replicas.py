"""The partition replicas a broker hosts: the replica set opens those the metadata places here, drops those it no
longer does, and reopens groups that stopped for lack of space once there is room again.

Opening a replica (its store, its journal and snapshot) is file work, so it runs on the opener (one thread), one
replica at a time, and only the finished group joins the Raft loop: creating thousands of partitions never stalls
the heartbeats and elections of the groups already running. While quiescence is on, the opener waits for room among
the replicas still starting (raft/starting.py). How a replica is made is handed in: `ReplicaFiles` (an LMDB store
and a Raft group under data_dir/partitions) in a broker, memory stores and in-process groups in component tests.
"""
from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from raftbus.broker.context import METADATA_GROUP, BrokerContext, PartitionReplica, replica_plan
from raftbus.broker.log.state import PartitionStateMachine
from raftbus.broker.log.verify import check_on_open
from raftbus.broker.queues.state.machine import QueueStateMachine
from raftbus.broker.raft import durable_meta
from raftbus.broker.raft.first_election import stagger_first_election
from raftbus.broker.raft.group import RaftGroup
from raftbus.broker.storage.base import is_disk_full
from raftbus.broker.storage.lmdb_store import LmdbStore

log = logging.getLogger(__name__)

METADATA_CHECK_INTERVAL_MS = 50  # how often the loop looks whether the metadata changed since the last reconcile


def tables_of(topic) -> tuple:
    return QueueStateMachine.TABLES if topic.kind == "queue" else PartitionStateMachine.TABLES


def state_machine_of(topic, store):
    return QueueStateMachine(store, topic.ordering) if topic.kind == "queue" else PartitionStateMachine(store)


def hosts_of(topic, partition: int) -> tuple[int, ...]:
    """The brokers hosting `partition` of `topic` (a topic holds its placements in partition order)."""
    return topic.partitions[partition].hosts if partition < len(topic.partitions) else ()


class ReplicaSet:
    """The replicas of `context.partitions`: opened, registered with the loop, dropped (loop thread, but for the
    opener's part)."""

    def __init__(self, context: BrokerContext, files, *, loop, opener, starting, faults, heap, group_commit,
                 stopping: threading.Event, bounded_start: bool, free_check_interval_ms: int,
                 gc_freeze_interval_ms: int, on_added: Sequence[Callable] = (), on_dropped: Sequence[Callable] = ()):
        self.context = context
        self.files = files  # open(group_id, topic, placement) -> (state machine, store, group); delete(group_id)
        self.loop = loop  # add_group, remove_group, call_soon
        self.opener = opener  # an executor: one thread in a broker
        self.starting = starting  # raft/starting.py StartingReplicas
        self.faults = faults  # raft/faults.py FaultWatch
        self.heap = heap  # heap.py FrozenHeap
        self.group_commit = group_commit
        self.stopping = stopping
        self.bounded_start = bounded_start  # raft_quiesce_enabled: open once fewer than starting_max are starting
        self.free_check_interval_ms = free_check_interval_ms
        self.gc_freeze_interval_ms = gc_freeze_interval_ms
        self.on_added = tuple(on_added)  # fn(replica, topic), after a replica joined the loop
        self.on_dropped = tuple(on_dropped)  # fn(replica), after its group left the loop, before its store closes
        self.opening: set[str] = set()  # replicas the opener is opening
        self._metadata_changed = True

    def register(self, registry) -> None:
        registry.on_applied(self.on_applied)
        registry.every("reconcile replicas", METADATA_CHECK_INTERVAL_MS, self.reconcile_if_changed)
        # every pass: cheap when nothing is starting, and the opener starts the next replica as soon as one quiesced
        registry.every("starting replicas", 0, self.settle_starting)
        registry.every("disk faults", self.free_check_interval_ms, self.check_faults)
        if self.gc_freeze_interval_ms:
            registry.every("heap freeze", self.gc_freeze_interval_ms, self.freeze_heap)

    # ------------------------------------------------------------------ loop thread
    def on_applied(self, group) -> None:
        """The metadata changed (a reconcile is due), or a replica applied (its fetch waiters wake)."""
        if group.group_id == METADATA_GROUP:
            self._metadata_changed = True
            return
        replica = self.context.partitions.get(group.group_id)
        if replica is not None:
            replica.notify_appended()

    def reconcile_if_changed(self) -> None:
        if self._metadata_changed:
            self._metadata_changed = False
            self.reconcile()

    def reconcile(self) -> None:
        """Open the partition replicas the metadata places here and drop the ones it no longer does."""
        self.follow_preferred_leaders()
        hosted = set(self.context.partitions) | set(self.opening)
        create, drop = replica_plan(self.context.metadata_sm.topics().values(), self.context.node_id, hosted)
        for group_id in drop:
            if group_id in self.context.partitions:
                self.drop(group_id)  # one still opening is closed when it is done (_opened)
        self.faults.forget_unplaced(set(self.context.partitions) | set(create) | set(self.opening))
        for group_id, (topic, placement) in create.items():
            if not self.faults.is_stopped(group_id):
                self.opening.add(group_id)
                self.opener.submit(self._open_off_loop, group_id, topic, placement)

    def follow_preferred_leaders(self) -> None:
        """A reassignment changes a partition's first replica: its groups prefer the new one."""
        topics = {t.topic_id: t for t in self.context.metadata_sm.topics().values()}
        for replica in self.context.partitions.values():
            topic = topics.get(replica.topic_id)
            if topic is not None and replica.partition < len(topic.partitions):
                replica.group.preferred_leader = topic.partitions[replica.partition].replicas[0]

    def drop(self, group_id: str) -> None:
        replica = self.context.partitions.pop(group_id)
        self.starting.forget(group_id)
        self.loop.remove_group(group_id)
        self.context.leaders.forget_group(group_id)
        for listener in self.on_dropped:
            listener(replica)
        replica.notify_appended()
        self.group_commit.forget(replica.group)
        replica.store.close()
        self.heap.dropped()
        self.files.delete(group_id)
        log.info("partition replica removed", extra={"group": group_id})

    def check_faults(self) -> None:
        """Measure the disk (hand leaderships away while it is full) and reopen, from their journals, the groups
        that stopped for lack of space once there is room again."""
        self.faults.check_disk()
        self.faults.lead_elsewhere()
        for group_id in self.faults.reopenable():
            group = self.loop.groups.get(group_id)
            try:
                if group is not None:
                    group.reopen()
            except Exception as exc:
                self.faults.on_open_failed(group_id, f"reopening failed: {type(exc).__name__}: {exc}",
                                           disk_full=is_disk_full(exc))
                continue
            self.faults.on_group_reopened(group_id)
            self._metadata_changed = True  # a replica that failed to open is opened by the next reconcile

    def settle_starting(self) -> None:
        self.starting.settle(self.loop.quiescence.quiesced if self.loop.quiescence is not None else ())

    def freeze_heap(self) -> None:
        self.heap.tick(len(self.context.partitions))

    # ------------------------------------------------------------------ the opener
    def _open_off_loop(self, group_id: str, topic, placement) -> None:
        """On the opener: open the replica once there is room among those starting, then hand it (or the failure)
        to the loop thread."""
        if self.bounded_start:
            self.starting.wait_for_room(self.stopping)
            self.starting.started(group_id)
        try:
            opened = self.files.open(group_id, topic, placement)
        except Exception as exc:  # recorded by _opened on the loop thread
            opened = exc
        try:
            self.loop.call_soon(lambda: self._opened(group_id, topic, placement, opened))
        except Exception:  # the loop has stopped: nothing will use this replica
            if not isinstance(opened, Exception):
                opened[1].close()

    def _opened(self, group_id: str, topic, placement, opened) -> None:
        self.opening.discard(group_id)
        if not self._register_opened(group_id, topic, placement, opened):
            self.starting.forget(group_id)

    def _register_opened(self, group_id: str, topic, placement, opened) -> bool:
        """Add an opened replica to the loop; False when it failed to open or is no longer placed here."""
        if isinstance(opened, Exception):
            self.faults.on_open_failed(group_id, f"{type(opened).__name__}: {opened}", disk_full=is_disk_full(opened))
            return False
        sm, store, group = opened
        still_here = self.context.metadata_sm.topic(topic.name)
        if self.stopping.is_set():
            group.close()
            store.close()
            return False
        if still_here is None or still_here.topic_id != topic.topic_id or \
                self.context.node_id not in hosts_of(still_here, placement.partition):
            group.close()
            store.close()  # placed elsewhere (moved off this broker, or deleted) while it opened
            self.files.delete(group_id)
            return False
        self._add(topic, placement, sm, store, group)
        return True

    def _add(self, topic, placement, sm, store, group) -> None:
        """An opened replica joins the broker (loop thread); one that failed to open (a damaged journal or store,
        no space) was flagged stopped by _opened and never keeps the others from opening."""
        replica = PartitionReplica(topic.name, topic.topic_id, placement.partition, group, sm, store)
        self.context.partitions[replica.group_id] = replica
        self.files.starting(group)
        self.loop.add_group(group)
        self.heap.grew()
        for listener in self.on_added:
            listener(replica, topic)
        log.info("partition replica created", extra={"group": replica.group_id, "topic": topic.name,
                                                     "partition": placement.partition})

    def close(self) -> None:
        """At stop: an open in progress finishes, none starts."""
        self.opener.shutdown(wait=True, cancel_futures=True)


class ReplicaFiles:
    """A broker's partition replicas on disk: an LMDB store and a Raft group (journal, snapshots) under
    `<data_dir>/partitions/<group id>/`."""

    def __init__(self, partitions_dir: Path, *, node_id: int, hub, loop, raft_settings, storage_settings,
                 open_stores, open_journals, disk, election_timeout_max_ms: int,
                 on_store_damaged: Callable[[str], None]):
        self.partitions_dir = partitions_dir
        self.node_id = node_id
        self.hub, self.loop = hub, loop
        self.raft_settings = raft_settings  # RaftSettings of every group
        self.storage_settings = storage_settings
        self.open_stores, self.open_journals = open_stores, open_journals  # storage/open_files.py budgets
        self.disk = disk
        self.election_timeout_max_ms = election_timeout_max_ms
        self.on_store_damaged = on_store_damaged

    def clear_interrupted_deletions(self) -> None:
        """Remove what a deletion cut short by a crash left (directories renamed `*.deleted-*`)."""
        for doomed in self.partitions_dir.glob("*.deleted-*"):
            shutil.rmtree(doomed, ignore_errors=True)

    def open(self, group_id: str, topic, placement):
        base = self.partitions_dir / group_id
        store = LmdbStore(str(base / "store"), tables=tables_of(topic),
                          map_size_bytes=self.storage_settings.storage_map_size_bytes, budget=self.open_stores,
                          create_at_first_write=True)
        try:
            sm = state_machine_of(topic, store)
            if not store.absent:  # an absent store holds nothing to check
                check_on_open(group_id, sm, store, self.storage_settings.storage_verify_on_open_bytes_max,
                              self.on_store_damaged)
            peers = sorted(r for r in placement.hosts if r != self.node_id)
            group = RaftGroup(group_id, sm, store, hub=self.hub, loop=self.loop, self_id=self.node_id,
                              peer_ids=peers, data_dir=base / "raft", settings=self.raft_settings,
                              preferred_leader=placement.replicas[0],
                              learner_ids=[r for r in placement.target if r not in placement.replicas],
                              journal_budget=self.open_journals, disk=self.disk)
        except BaseException:
            store.close()
            raise
        return sm, store, group

    def starting(self, group) -> None:
        """Just before a new group first ticks (loop thread): its preferred replica stands for election at once."""
        stagger_first_election(group, self.node_id, self.election_timeout_max_ms)

    def delete(self, group_id: str) -> None:
        """Delete a closed replica's directory: renamed at once (a replica placed here again starts from an empty
        directory), removed on a thread of its own. On the Raft loop, a term or vote the replica wrote in this pass
        is first taken out of the pass's sync (durable_meta): its file would be gone by then."""
        path = self.partitions_dir / group_id
        deferred = durable_meta.current()
        if deferred is not None:
            deferred.forget_under(str(path))
        doomed = path.with_name(f"{group_id}.deleted-{time.monotonic_ns()}")
        try:
            path.rename(doomed)
        except FileNotFoundError:
            return
        except OSError:
            doomed = path
        threading.Thread(target=shutil.rmtree, args=(doomed,), kwargs={"ignore_errors": True}, daemon=True).start()
