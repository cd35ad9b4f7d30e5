"""A broker process: one gRPC server, one Raft loop and transport, the metadata group and its partition replicas."""
from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from raftbus.broker.clock import SystemClock
from raftbus.broker.raft.disk import DiskSpace
from raftbus.broker.raft.faults import FaultWatch
from raftbus.broker.raft.group_commit import GroupCommit
from raftbus.broker.metrics.exporter import MetricsExporter
from raftbus.broker.raft.loop import CONTROL_CHANNEL, RaftLoop
from raftbus.broker.raft.quiesce import Quiescence
from raftbus.broker.raft.early_votes import EarlyVotes
from raftbus.broker.raft.starting import StartingReplicas
from raftbus.broker.raft.first_election import stagger_first_election
from raftbus.broker.raft.group import RaftGroup
from raftbus.broker.raft.reboot import BootRecord, discard_stores
from raftbus.broker.metadata.service import AdminService
from raftbus.broker.context import METADATA_GROUP, BrokerContext, PartitionReplica, replica_plan
from raftbus.broker.queues.dead_letters import DeadLetters
from raftbus.broker.leaders import LeaderGossip, LeaderTable
from raftbus.broker.log.service import LogService
from raftbus.broker.queues.service import QueueService
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.log.state import PartitionStateMachine
from raftbus.broker.log.verify import check_on_open
from raftbus.broker.queues.state.machine import QueueStateMachine
from raftbus.broker.storage.base import is_disk_full
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.storage.open_files import OpenBudget, derived_limit
from raftbus.broker.heap import FrozenHeap, hold_malloc_trim_threshold, pin_malloc_mmap_threshold
from raftbus.broker.metadata.integrity import integrity_servicers
from raftbus.broker.metadata.servicer import admin_servicers
from raftbus.broker.call_limits import LongCallSlots
from raftbus.broker.grpc_server import build_server
from raftbus.broker.log.servicer import log_servicers
from raftbus.broker.raft.hub import RaftHub
from raftbus.broker.raft.tls import raft_tls
# consumer groups
from raftbus.broker.groups.service import GroupService
from raftbus.broker.groups.offset_service import OffsetService
from raftbus.broker.groups.servicer import group_servicers
from raftbus.broker.queues.forwarder import QueueForwarder
from raftbus.broker.queues.servicer import queue_servicers
from raftbus.broker.security import wiring as security
# membership and data movement
from raftbus.broker.metadata.join import join_cluster, joined_state
from raftbus.broker.metadata.voters import MembershipService
from raftbus.broker.metadata.membership_servicer import membership_servicers
from raftbus.broker.metadata.reassignment_driver import Reassigner
from raftbus.broker.metadata.decommission import Decommissions
from raftbus.broker.security import tls as security_tls
from raftbus.broker.security.tokens import internal_token

log = logging.getLogger(__name__)
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> int:
    """Resident memory of this process now (Linux /proc), 0 where unknown."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return 0



def core_servicers(log_service, admin_service, peer_credentials: dict | None = None) -> list:
    """The Log and Admin services every broker serves."""
    return log_servicers(log_service, peer_credentials) + admin_servicers(admin_service)


def _hosts_of(topic, partition: int) -> tuple[int, ...]:
    """The brokers hosting `partition` of `topic` (a topic holds its placements in partition order)."""
    return topic.partitions[partition].hosts if partition < len(topic.partitions) else ()


class Broker:
    def __init__(self, settings, clock=None):
        self.settings = settings
        self.clock = clock or SystemClock()
        self.node_id = settings.node_id
        self.data_dir = Path(settings.data_dir)
        self._stopping = threading.Event()
        self._metadata_changed = True
        self._gossip_due = True
        self._queue_replicas: tuple | None = None  # (the metadata's topics, the queue replicas hosted here)
        self._led_quiesced: dict[str, tuple] = {}  # quiesced group led here → (term, isr) as last gossiped
        self._led_awake: set[str] = set()  # awake groups led here at the last gossip round
        self._gossip_live: frozenset | None = None  # the live brokers the quiesced entries were worked out with
        self.group_commit = GroupCommit(settings.storage_sync_interval_ms)
        self.started_monotonic = time.monotonic()
        self._threads: list[threading.Thread] = []
        self.grpc_port: int | None = None
        self.metrics = MetricsExporter(settings)

    # ------------------------------------------------------------------ start
    def start(self) -> "Broker":
        s = self.settings
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.boot = BootRecord(self.data_dir)
        if self.boot.unclean_reboot():
            discard_stores(self.data_dir)
        self.boot.starting()
        for doomed in (self.data_dir / "partitions").glob("*.deleted-*"):  # a deletion cut short by a crash
            shutil.rmtree(doomed, ignore_errors=True)
        self.loop = RaftLoop(tick_interval_ms=s.raft_tick_interval_ms, log_bytes_max=s.raft_log_bytes_broker_max,
                             early_votes=EarlyVotes(s.raft_early_votes_keep_ms, s.raft_early_votes_groups_max))
        self.metrics.watch(self.loop)
        meta_dir = self.data_dir / "metadata"
        joined = self._joined(meta_dir)
        peers = {node: addr for node, addr in s.peer_addresses.items() if node != self.node_id}
        if joined is not None:
            peers = {node: addr for node, addr in joined["brokers"].items() if node != self.node_id}
        self._configured_peers = dict(peers)
        self._hub_peers = dict(peers)
        self.hub = RaftHub(
            self.node_id, s.raft_address, peers, s.raft_secret,
            on_message=self.loop.on_message,
            on_peer_connected=self.loop.on_peer_connected,
            on_peer_disconnected=self.loop.on_peer_disconnected,
            frame_bytes_max=s.raft_frame_bytes_max,
            send_buffer_bytes_max=s.raft_send_buffer_bytes_max,
            connect_retry_ms=s.raft_connect_retry_ms,
            handshake_timeout_ms=s.raft_handshake_timeout_ms,
            handshakes_pending_max=s.raft_handshakes_pending_max,
            handshakes_pending_per_address_max=s.raft_handshakes_pending_per_address_max,
            tls=raft_tls(s.raft_tls_cert_file, s.raft_tls_key_file, s.raft_tls_ca_file),
            accepted_secrets=s.raft_accepted_secrets,
        )
        self.loop.attach(self.hub)
        self.hub.start()
        self.disk = DiskSpace(self.data_dir, s.storage_free_bytes_min)
        self.disk.check()
        self.faults = FaultWatch(self.disk, self.loop.groups, broker_group=METADATA_GROUP)
        self._opening: set[str] = set()  # replicas the opener thread is opening
        self._opener = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raftbus-replica-opener")
        self.starting = StartingReplicas(s.raft_replicas_starting_max, s.raft_replica_starting_timeout_ms)
        pin_malloc_mmap_threshold(s.malloc_mmap_threshold_bytes)  # before stores open and close (heap.py)
        hold_malloc_trim_threshold(s.malloc_trim_threshold_bytes)  # free heap kept for the next batch (heap.py)
        replicas_open_max = derived_limit(s.storage_replicas_open_max, s.storage_fds_reserved)
        self.open_stores = OpenBudget(replicas_open_max, "stores")      # partition stores with their files open
        self.open_journals = OpenBudget(replicas_open_max, "journals")  # partition journals with their file open
        self.heap = FrozenHeap(s.gc_drops_collect_fraction)  # short collector pauses with many replicas (heap.py)
        self.loop.stopped_listeners.append(self.faults.on_group_stopped)
        self.loop.quiescence = Quiescence(self.loop, self.hub, self.node_id, s.quiesce(), excluded={METADATA_GROUP})
        self.loop.stopped_listeners.append(self.loop.quiescence.on_group_stopped)

        self.metadata_store = LmdbStore(str(meta_dir / "store"), tables=MetadataStateMachine.TABLES,
                                        map_size_bytes=s.storage_map_size_bytes)
        self.metadata_sm = MetadataStateMachine(self.metadata_store)
        check_on_open(METADATA_GROUP, self.metadata_sm, self.metadata_store, s.storage_verify_on_open_bytes_max,
                      self._on_store_damaged)
        self.metadata_group = RaftGroup(
            METADATA_GROUP, self.metadata_sm, self.metadata_store, hub=self.hub, loop=self.loop,
            self_id=self.node_id, peer_ids=sorted(joined["voters"] if joined else peers),
            data_dir=meta_dir / "raft", settings=s.raft(), learner_ids=joined["learners"] if joined else (),
            eager_commit_notify=True)
        self.metadata_group.disk = self.disk
        self.leaders = LeaderTable(stale_after_s=max(3 * s.leader_gossip_interval_ms / 1000, 3.0))
        self.gossip = LeaderGossip(full_every_rounds=s.leader_gossip_full_interval_ms // s.leader_gossip_interval_ms)
        self.context = BrokerContext(node_id=self.node_id, settings=s, clock=self.clock,
                                     metadata_sm=self.metadata_sm, metadata_group=self.metadata_group,
                                     leaders=self.leaders, alive=lambda: set(self.hub.connected_peers()))
        self.context.process_stats = self._process_stats
        self.log_service = LogService(self.context)
        self.admin_service = AdminService(self.context)
        self.membership_service = MembershipService(self.context, self.admin_service.register_broker)
        self.decommissions = Decommissions(self.context)
        # queue topics
        self.queue_service = QueueService(self.context)
        self.security = security.ClientPortSecurity(self.context)
        self.queue_forwarder = QueueForwarder(self.context, self.queue_service, timeout_ms=s.queue_forward_timeout_ms,
                                              credentials=self.security.peer_credentials())
        self.dead_letters = DeadLetters(self.context, self.queue_service, self.queue_forwarder)

        self.loop.add_group(self.metadata_group)
        self.loop.on_control = self._on_control
        self.loop.applied_listeners.append(self._on_applied)
        self.loop.leadership_listeners.append(lambda group: self._flag_gossip())
        self.loop.peer_listeners.append(self._on_peer)
        self.loop.every(50, self._reconcile_if_changed)
        self.loop.every(s.leader_gossip_interval_ms, self._gossip)
        self.loop.every(s.retention_check_interval_ms, self._enforce_retention)
        self.loop.every(s.offsets_retention_check_interval_ms, self._expire_offsets)
        self.loop.every(s.preferred_leader_check_interval_ms, self._prefer_leaders)
        self.loop.every(s.drain_check_interval_ms, self._drain_leaderships)
        self.loop.every(s.membership_check_interval_ms, self.membership_service.promote_caught_up)
        self.loop.every(s.membership_check_interval_ms, Reassigner(self.context).advance)
        self.loop.every(s.membership_check_interval_ms, self.decommissions.advance)
        self.loop.every(s.queue_tick_interval_ms, self._tick_queues)
        self.loop.every(0, lambda: self.starting.settle(self.loop.quiescence.quiesced))  # every pass: cheap when
        # nothing is starting, and the opener starts the next replica as soon as one quiesced
        self.context.run_on_loop = self.loop.call
        self.context.on_store_rebuilt = self._on_store_rebuilt
        self.loop.every(s.storage_free_check_interval_ms, self._check_faults)
        if s.gc_freeze_interval_ms:
            self.loop.every(s.gc_freeze_interval_ms, lambda: self.heap.tick(len(self.context.partitions)))
        self.loop.call_soon(self._reconcile)
        # consumer groups: heartbeats long-poll on metadata changes; the controller expires silent members
        self.group_service = GroupService(self.context)
        self.offset_service = OffsetService(self.context)
        self.loop.applied_listeners.append(self.group_service.on_metadata_event)
        self.loop.leadership_listeners.append(self.group_service.on_metadata_event)
        self.loop.every(s.group_expiry_check_interval_ms, self.group_service.expire_due)
        self.loop.start(name=f"raftbus-raft-{self.node_id}")

        self.metrics.start(self)
        servicers = core_servicers(self.log_service, self.admin_service, self.security.peer_credentials())
        servicers += group_servicers(self.group_service, self.offset_service)  # consumer groups
        servicers += queue_servicers(self.queue_service, self.dead_letters)
        servicers += integrity_servicers(self.context)  # raftbus cluster verify
        servicers += self.security.servicers()
        servicers += membership_servicers(self.membership_service, self.decommissions)
        self.server, self.health, self.grpc_port = build_server(
            s.listen, servicers, workers_max=s.grpc_workers_max, message_bytes_max=s.grpc_message_bytes_max,
            concurrent_rpcs_max=s.grpc_concurrent_rpcs_max,
            long_calls=LongCallSlots(s.grpc_long_calls_max, s.grpc_long_calls_per_connection_max),
            credentials=self.security.server_credentials(),
            interceptors=self.metrics.interceptors() + self.security.interceptors())
        self.server.start()
        self._spawn(lambda: self.group_commit.run(self._stopping), "raftbus-group-commit")
        self._spawn(self._register, "raftbus-register")
        self._spawn(self._move_dead_letters, "raftbus-dead-letters")
        self.security.start(self._spawn, self._stopping)
        from grpc_health.v1 import health_pb2

        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.faults.attach_health(self.health)
        log.info("broker started", extra={"node_id": self.node_id, "listen": s.listen,
                                          "raft_listen": s.raft_listen})
        return self

    def _spawn(self, target, name: str) -> None:
        thread = threading.Thread(target=target, name=f"{name}-{self.node_id}", daemon=True)
        thread.start()
        self._threads.append(thread)

    # ------------------------------------------------------------------ loop-thread callbacks
    def _on_applied(self, group) -> None:
        self.group_commit.mark(group)
        if group.group_id == METADATA_GROUP:
            self._metadata_changed = True
            return
        replica = self.context.partitions.get(group.group_id)
        if replica is not None:
            replica.notify_appended()

    def _on_peer(self, peer_id: int, connected: bool) -> None:
        if connected:
            self.gossip.peer_connected(peer_id)
            self._gossip_due = True
        else:
            self.leaders.forget_broker(peer_id)

    def _flag_gossip(self) -> None:
        self._gossip_due = True

    def _on_store_damaged(self, group_id: str) -> None:
        self.faults.on_store_damaged(group_id)
        self._gossip_due = True  # the leaders elsewhere stop handing this replica its preferred leadership

    def _on_store_rebuilt(self, group_id: str) -> None:
        self.faults.on_store_rebuilt(group_id)
        self._gossip_due = True

    def _on_control(self, peer_id: int, message) -> None:
        if not isinstance(message, dict):
            return
        if message.get("disk_full"):
            self.faults.peers_disk_full.add(peer_id)
        else:
            self.faults.peers_disk_full.discard(peer_id)
        damaged = message.get("damaged", ())
        self.faults.peers_damaged[peer_id] = {str(g) for g in damaged} if isinstance(damaged, list) else set()
        try:
            led = [(str(g), int(term), [int(b) for b in isr]) for g, term, isr in message.get("leaders", ())]
            gone = [str(g) for g in message.get("gone", ())]
        except (TypeError, ValueError):
            return
        self.leaders.apply_gossip(peer_id, led, gone, full=bool(message.get("full", True)))

    def _gossip(self) -> None:
        updates = self._led_updates()
        extra = {"disk_full": self.disk.full, "damaged": self.faults.stats()["damaged_stores"]}
        for peer, message in self.gossip.round(updates, self.hub.connected_peers(), extra).items():
            self.hub.send(peer, CONTROL_CHANNEL, message)
        self._gossip_due = False

    def _led_updates(self) -> dict[str, tuple | None]:
        """(term, in-sync replicas) of the groups led here whose entry may have changed since the last round, None
        for those no longer led here (LeaderGossip.round). Every awake leader is looked at; a quiesced group's entry
        changes only when it quiesces or wakes (Quiescence.take_led_changes) or the set of live brokers changes, so
        idle groups, and groups that did not change while thousands of others did, cost a round nothing."""
        quiescence = self.loop.quiescence
        live = frozenset(quiescence.live_peers())
        changed = quiescence.take_led_changes()
        if live != self._gossip_live:
            self._gossip_live = live
            changed |= quiescence.led.keys() | self._led_quiesced.keys()
        updates: dict[str, tuple | None] = {}
        for group_id in changed:
            group = self.loop.groups.get(group_id) if group_id in quiescence.led else None
            if group is None:
                self._led_quiesced.pop(group_id, None)
                updates[group_id] = None
            else:
                updates[group_id] = self._led_quiesced[group_id] = (group.term, group.in_sync_replicas(self.node_id))
        led_awake = set()
        for group in self.loop.awake.values():
            if group.is_leader:
                led_awake.add(group.group_id)
                updates[group.group_id] = (group.term, group.in_sync_replicas(self.node_id))
        for group_id in self._led_awake - led_awake:  # awake and led at the last round, not now
            if group_id not in updates:
                updates[group_id] = self._led_quiesced.get(group_id)
        self._led_awake = led_awake
        return updates

    def _reconcile_if_changed(self) -> None:
        if self._gossip_due:
            self._gossip()
        if self._metadata_changed:
            self._metadata_changed = False
            self._reconcile()

    def _joined(self, meta_dir: Path) -> dict | None:
        """The metadata members and Raft peers of a broker that joined a running cluster (`join`), asking the
        cluster on its first start; None for a broker bootstrapped from `peers`."""
        state = joined_state(meta_dir)
        if state is not None or not self.settings.join:
            return state
        credentials = security_tls.peer_tls_files(self.settings)
        if self.settings.auth_enabled:
            credentials["token"] = internal_token(self.settings.cluster_secret)
        return join_cluster(self.settings, "", credentials, meta_dir)

    def _sync_raft_peers(self) -> None:
        """The Raft transport accepts and dials every registered broker (and the configured peers)."""
        wanted = {b.broker_id: b.raft_address for b in self.metadata_sm.brokers().values()
                  if b.broker_id != self.node_id and b.raft_address}
        wanted.update(self._configured_peers)
        if wanted != self._hub_peers:
            self._hub_peers = wanted
            self.hub.set_peers(wanted)

    def _follow_preferred_leaders(self) -> None:
        """A reassignment changes a partition's first replica: its groups prefer the new one."""
        topics = {t.topic_id: t for t in self.metadata_sm.topics().values()}
        for replica in self.context.partitions.values():
            topic = topics.get(replica.topic_id)
            if topic is not None and replica.partition < len(topic.partitions):
                replica.group.preferred_leader = topic.partitions[replica.partition].replicas[0]

    def _reconcile(self) -> None:
        """Create the partition replicas the metadata places here and drop the ones it no longer does (loop thread).

        Opening a replica (its LMDB store, its journal and snapshot) is file work, so it runs on the replica
        opener thread, one replica at a time, and only the finished group is added to the loop: creating
        thousands of partitions never stalls the heartbeats and elections of the groups already running."""
        self._sync_raft_peers()
        self._follow_preferred_leaders()
        hosted = set(self.context.partitions) | set(self._opening)
        create, drop = replica_plan(self.metadata_sm.topics().values(), self.node_id, hosted)
        for group_id in drop:
            if group_id in self.context.partitions:
                self._drop_replica(group_id)  # one still opening is closed when it is done (_opened)
        self.faults.forget_unplaced(set(self.context.partitions) | set(create) | set(self._opening))
        for group_id, (topic, placement) in create.items():
            if not self.faults.is_stopped(group_id):
                self._opening.add(group_id)
                self._opener.submit(self._open_off_loop, group_id, topic, placement)

    def _open_off_loop(self, group_id: str, topic, placement) -> None:
        """On the opener thread: open the replica once fewer than raft_replicas_starting_max new replicas are still
        starting (raft/starting.py), then hand it (or the failure) to the loop thread."""
        if self.settings.raft_quiesce_enabled:
            self.starting.wait_for_room(self._stopping)
            self.starting.started(group_id)
        try:
            opened = self._open_replica(group_id, topic, placement)
        except Exception as exc:  # recorded by _opened on the loop thread
            opened = exc
        try:
            self.loop.call_soon(lambda: self._opened(group_id, topic, placement, opened))
        except Exception:  # the loop has stopped: nothing will use this replica
            if not isinstance(opened, Exception):
                opened[1].close()

    def _opened(self, group_id: str, topic, placement, opened) -> None:
        self._opening.discard(group_id)
        if not self._register_opened(group_id, topic, placement, opened):
            self.starting.forget(group_id)

    def _register_opened(self, group_id: str, topic, placement, opened) -> bool:
        """Add an opened replica to the loop; False when it failed to open or is no longer placed here."""
        if isinstance(opened, Exception):
            self.faults.on_open_failed(group_id, f"{type(opened).__name__}: {opened}", disk_full=is_disk_full(opened))
            return False
        sm, store, group = opened
        still_here = self.metadata_sm.topic(topic.name)
        if self._stopping.is_set():
            group.close()
            store.close()
            return False
        if still_here is None or still_here.topic_id != topic.topic_id or \
                self.node_id not in _hosts_of(still_here, placement.partition):
            group.close()
            store.close()  # placed elsewhere (moved off this broker, or deleted) while it opened
            self._delete_replica_files(group_id)
            return False
        self._register_replica(group_id, topic, placement, sm, store, group)
        return True

    def _partition_dir(self, group_id: str) -> Path:
        return self.data_dir / "partitions" / group_id

    def _register_replica(self, group_id: str, topic, placement, sm, store, group) -> None:
        """An opened replica joins the broker (loop thread); one that failed to open (a damaged journal or store,
        no space) was flagged stopped by _opened and never keeps the others from opening."""
        self.context.partitions[group_id] = PartitionReplica(topic.name, topic.topic_id, placement.partition,
                                                             group, sm, store)
        if topic.kind == "queue":  # a stream replica leaves the queue tick's list as it was
            self._queue_replicas = None
        stagger_first_election(group, self.node_id, self.settings.raft_election_timeout_max_ms)
        self.loop.add_group(group)
        self.heap.grew()
        log.info("partition replica created", extra={"group": group_id, "topic": topic.name,
                                                     "partition": placement.partition})

    def _open_replica(self, group_id: str, topic, placement):
        s = self.settings
        base = self._partition_dir(group_id)
        tables = QueueStateMachine.TABLES if topic.kind == "queue" else PartitionStateMachine.TABLES
        store = LmdbStore(str(base / "store"), tables=tables, map_size_bytes=s.storage_map_size_bytes,
                          budget=self.open_stores, create_at_first_write=True)
        try:
            sm = QueueStateMachine(store, topic.ordering) if topic.kind == "queue" else PartitionStateMachine(store)
            if not store.absent:  # an absent store holds nothing to check
                check_on_open(group_id, sm, store, s.storage_verify_on_open_bytes_max, self._on_store_damaged)
            peers = sorted(r for r in placement.hosts if r != self.node_id)
            group = RaftGroup(group_id, sm, store, hub=self.hub, loop=self.loop, self_id=self.node_id,
                              peer_ids=peers, data_dir=base / "raft", settings=s.raft(),
                              preferred_leader=placement.replicas[0],
                              learner_ids=[r for r in placement.target if r not in placement.replicas],
                              journal_budget=self.open_journals)
        except BaseException:
            store.close()
            raise
        group.disk = self.disk
        return sm, store, group

    def _drop_replica(self, group_id: str) -> None:
        replica = self.context.partitions.pop(group_id)
        self._queue_replicas = None
        self.starting.forget(group_id)
        self.loop.remove_group(group_id)
        self.leaders.forget_group(group_id)
        self.queue_service.forget(group_id)
        replica.notify_appended()
        self.group_commit.forget(replica.group)
        replica.store.close()
        self.heap.dropped()
        self._delete_replica_files(group_id)
        log.info("partition replica removed", extra={"group": group_id})

    def _delete_replica_files(self, group_id: str) -> None:
        """Delete a closed replica's directory: renamed at once (a replica placed here again starts from an empty
        directory), removed on a thread of its own."""
        path = self._partition_dir(group_id)
        doomed = path.with_name(f"{group_id}.deleted-{time.monotonic_ns()}")
        try:
            path.rename(doomed)
        except FileNotFoundError:
            return
        except OSError:
            doomed = path
        threading.Thread(target=shutil.rmtree, args=(doomed,), kwargs={"ignore_errors": True}, daemon=True).start()

    def _check_faults(self) -> None:
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

    def _led_stream_partitions(self):
        """(replica, topic) of every stream partition this broker leads now."""
        topics = {t.topic_id: t for t in self.metadata_sm.topics().values()}
        for replica in list(self.context.partitions.values()):
            topic = topics.get(replica.topic_id)
            if topic is not None and topic.kind == "stream" and replica.group.caught_up_as_leader:
                yield replica, topic

    def _enforce_retention(self) -> None:
        for replica, topic in self._led_stream_partitions():
            try:
                self.log_service.trim_if_due(replica, topic.retention_ms, topic.retention_bytes)
            except Exception:
                log.exception("retention check failed", extra={"group": replica.group_id})

    def _expire_offsets(self) -> None:
        """Committed offsets of groups that no longer exist, past offsets_retention_ms, on partitions led here."""
        live_groups = set(self.metadata_sm.groups())
        for replica, _topic in self._led_stream_partitions():
            try:
                self.offset_service.expire_if_due(replica, live_groups)
            except Exception:
                log.exception("offset expiry check failed", extra={"group": replica.group_id})

    def _prefer_leaders(self) -> None:
        """Leaders move to their preferred replica, unless it is draining or its disk is full."""
        connected = self.hub.connected_peers()
        draining = self._draining_brokers()
        if self.node_id in draining or self.disk.full:
            return
        for replica in list(self.context.partitions.values()):
            group = replica.group
            if group.preferred_leader in self.faults.peers_disk_full or \
                    group.group_id in self.faults.peers_damaged.get(group.preferred_leader, ()):
                continue
            if group.is_leader and group.preferred_leader in connected and group.preferred_leader not in draining:
                group.maybe_transfer_to_preferred()

    def _draining_brokers(self) -> set[int]:
        return {b.broker_id for b in self.metadata_sm.brokers().values() if b.draining}

    def _drain_leaderships(self) -> None:
        """A draining broker hands every group it leads to a connected replica that is not draining (the metadata
        group included); a denied hand-over (target behind) is tried again at the next check."""
        draining = self._draining_brokers()
        if self.node_id not in draining:
            return
        connected = self.hub.connected_peers()
        groups = [self.metadata_group, *(r.group for r in list(self.context.partitions.values()))]
        for group in groups:
            if not group.is_leader:
                continue
            targets = sorted(p for p in group.membership.voters if p in connected and p not in draining)
            if targets:
                group.hand_over(targets[0])

    def _process_stats(self) -> dict:
        """Resource use of this process and the group-commit window (any thread)."""
        times = os.times()
        groups = list(self.loop.groups.values())
        window = self.group_commit.percentiles()
        missing = -1.0
        return {
            "rss_bytes": resident_bytes(), "cpu_user_s": times.user, "cpu_system_s": times.system,
            "uptime_s": time.monotonic() - self.started_monotonic, "groups_hosted": len(groups),
            "groups_led": sum(1 for g in groups if g.is_leader),
            "durability_window_p50_ms": window["p50_ms"] if window["p50_ms"] is not None else missing,
            "durability_window_p99_ms": window["p99_ms"] if window["p99_ms"] is not None else missing,
            "durability_window_max_ms": window["max_ms"] if window["max_ms"] is not None else missing,
            "group_commit_rounds": self.group_commit.rounds, "pid": os.getpid(), **self.faults.stats(),
            "groups_quiesced": len(self.loop.quiescence.quiesced),
        }

    def _tick_queues(self) -> None:
        """Queue partitions led here with due work (expired leases, due delayed messages) get a tick command."""
        for replica, topic in self._hosted_queue_replicas():
            if replica.group.caught_up_as_leader:  # its clock anchors at the latest time applied (TermClock)
                try:
                    self.queue_service.tick_if_due(replica, topic)
                except Exception:
                    log.exception("queue tick failed", extra={"group": replica.group_id})

    def _hosted_queue_replicas(self) -> list:
        """(replica, topic) of every queue partition hosted here, worked out again only when the topics or the
        hosted replicas change (stream partitions cost the queue tick nothing)."""
        topics = self.metadata_sm.topics()
        if self._queue_replicas is None or self._queue_replicas[0] is not topics:
            by_id = {t.topic_id: t for t in topics.values() if t.kind == "queue"}
            hosted = [(r, by_id[r.topic_id]) for r in self.context.partitions.values() if r.topic_id in by_id]
            self._queue_replicas = (topics, hosted)
        return self._queue_replicas[1]

    # ------------------------------------------------------------------ background threads
    def _move_dead_letters(self) -> None:
        """Copy dead-lettered messages of the queue partitions led here to their dead-letter topics."""
        interval = self.settings.queue_dead_letter_interval_ms / 1000
        while not self._stopping.wait(interval):
            try:
                self.dead_letters.move_once()
            except Exception:
                log.exception("dead-letter move failed")

    def _register(self) -> None:
        """Record this broker's client address in the metadata group (again whenever it differs)."""
        s = self.settings
        raft_address = s.raft_listen
        while not self._stopping.wait(0.2):
            known = self.metadata_sm.brokers().get(self.node_id)
            if known is not None and (known.address, known.raft_address, known.metrics_url) == (
                    s.client_address, raft_address, self.metrics.url):
                if self._stopping.wait(2.0):
                    return
                continue
            if self.metadata_group.leader_id is None:
                continue
            try:
                self.admin_service.register_broker(self.node_id, s.client_address, raft_address, self.metrics.url)
            except Exception as exc:
                log.debug("broker registration will be retried: %s", exc)

    # ------------------------------------------------------------------ stop
    def stop(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        self.context.stopping.set()
        from grpc_health.v1 import health_pb2

        self.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        self._hand_off_leadership()
        self.server.stop(grace=1.0).wait(2.0)
        self.metrics.stop()
        self.queue_forwarder.close()
        self._opener.shutdown(wait=True, cancel_futures=True)  # an open in progress finishes; none starts
        self.loop.stop()
        self.hub.close()
        for thread in self._threads:
            thread.join(1.0)
        for replica in list(self.context.partitions.values()):
            replica.store.sync()
            replica.store.close()
        self.metadata_store.sync()
        self.metadata_store.close()
        self.boot.stopped_cleanly()
        log.info("broker stopped", extra={"node_id": self.node_id})

    def _hand_off_leadership(self) -> None:
        """Ask a caught-up follower to take over each group led here, and wait (bounded) for it to do so."""
        if not self.loop.running:
            return
        deadline = time.monotonic() + self.settings.shutdown_timeout_ms / 2000

        def transfer():
            led = [g for g in self.loop.groups.values() if g.is_leader and g.transport.nodes]
            for group in led:
                group.hand_over()
            return len(led)

        while time.monotonic() < deadline:
            try:
                if self.loop.call(transfer, timeout_s=1.0) == 0:
                    return
            except Exception:
                return
            time.sleep(0.1)
