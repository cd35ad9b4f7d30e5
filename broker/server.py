"""A broker process, built from its parts in order: the data directory, the Raft loop and its peer transport, the
metadata group, the features and the replica set (assembly.py, shared with the component harness), then the
client port; and stopped in the reverse order, leaderships handed over first. Each part registers its own periodic
tasks, threads, servicers and listeners (registry.py); nothing here decides what a feature owns
(docs/architecture.md, "The assembly")."""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grpc_health.v1 import health_pb2

from raftbus.broker.assembly import assemble
from raftbus.broker.clock import SystemClock
from raftbus.broker.context import METADATA_GROUP, BrokerContext
from raftbus.broker.grpc_server import build_server
from raftbus.broker.heap import FrozenHeap, HeapTrimmer, hold_malloc_trim_threshold, pin_malloc_mmap_threshold
from raftbus.broker.leaders import LeaderTable
from raftbus.broker.leadership.gossip import Gossip
from raftbus.broker.leadership.placement import LeaderPlacement
from raftbus.broker.log.verify import check_on_open
from raftbus.broker.metadata.join import membership_at_start
from raftbus.broker.metadata.raft_peers import RaftPeers
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.metrics.exporter import MetricsExporter
from raftbus.broker.process_stats import ProcessStats
from raftbus.broker.raft.disk import DiskSpace
from raftbus.broker.raft.early_votes import EarlyVotes
from raftbus.broker.raft.faults import FaultWatch
from raftbus.broker.raft.group import RaftGroup
from raftbus.broker.raft.group_commit import GroupCommit
from raftbus.broker.raft.hub import RaftHub
from raftbus.broker.raft.loop import RaftLoop
from raftbus.broker.raft.quiesce import Quiescence
from raftbus.broker.raft.reboot import BootRecord, discard_stores
from raftbus.broker.raft.tls import raft_tls
from raftbus.broker.registry import Registry
from raftbus.broker.section import parse_address
from raftbus.broker.replicas import ReplicaFiles
from raftbus.broker.security.wiring import peer_credentials
from raftbus.broker.settings import BrokerSettings
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.address_bound import AddressBound
from raftbus.broker.storage.open_files import OpenBudget, plan_descriptors
from raftbus.broker.storage.private import private_data_dir

log = logging.getLogger(__name__)


def warn_exposure(settings: BrokerSettings) -> None:
    """At every start: the ports serving callers beyond loopback without authentication (which validate() lets
    through only with allow_insecure_network)."""
    exposed = settings.exposed_without_auth
    if exposed:
        log.warning("allow_insecure_network: serving without authentication beyond loopback (%s); anyone who "
                    "reaches these ports may do everything they serve", ", ".join(exposed))


class Broker:
    def __init__(self, settings: BrokerSettings, clock=None):
        self.settings = settings
        self.clock = clock or SystemClock()
        self.node_id = settings.node.node_id
        self.data_dir = Path(settings.node.data_dir)
        self.stopping = threading.Event()
        self.registry = Registry()
        self.group_commit = GroupCommit(settings.storage.storage_sync_interval_ms)
        self.metrics = MetricsExporter(settings.metrics, settings.node.client_address)
        self.grpc_port: int | None = None

    # ------------------------------------------------------------------ start
    def start(self) -> "Broker":
        warn_exposure(self.settings)
        self._open_data_dir()
        self._start_raft()
        self._open_metadata()
        self._assemble()
        self.loop.start(name=f"raftbus-raft-{self.node_id}")  # before the client port: it serves from the loop
        self.metrics.start(self)
        self._serve()
        self.registry.start(self.stopping, str(self.node_id))
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.faults.attach_health(self.health)
        log.info("broker started", extra={"node_id": self.node_id, "listen": self.settings.node.listen,
                                          "raft_listen": self.settings.node.raft_listen})
        return self

    def _open_data_dir(self) -> None:
        """The boot record (stores discarded after an unclean reboot, docs/storage.md), the bounds on open stores and
        journals, the disk's free space."""
        private_data_dir(self.data_dir)  # 0700, everything under it owner-only (docs/security.md)
        self.boot = BootRecord(self.data_dir)
        if self.boot.unclean_reboot():
            discard_stores(self.data_dir)
        self.boot.starting()
        s = self.settings.storage
        kafka = self.settings.kafka
        client_connections_max = self.settings.grpc.grpc_connections_max + (
            kafka.kafka_connections_max if kafka.kafka_listen else 0)
        replicas_open_max = plan_descriptors(s, client_connections_max)
        self.open_stores = OpenBudget(replicas_open_max, "stores")      # partition stores with their files open
        self.open_journals = OpenBudget(replicas_open_max, "journals")  # partition journals with their file open
        self.disk = DiskSpace(self.data_dir, s.storage_free_bytes_min)

    def _start_raft(self) -> None:
        """The one Raft loop and its peer transport (the peers of `peers`, or of a join), faults and quiescence."""
        s, node = self.settings.raft, self.settings.node
        self.loop = RaftLoop(tick_interval_ms=s.tick_interval_ms, log_bytes_max=s.log_bytes_broker_max,
                             early_votes=EarlyVotes(s.early_votes_keep_ms, s.early_votes_groups_max),
                             stall_report_ms=s.loop_stall_report_ms)
        self.metrics.watch(self.loop)
        self.joined = membership_at_start(node, self.settings.membership,
                                          peer_credentials(self.settings.security, node.cluster_keys),
                                          self.data_dir / "metadata")
        known = self.joined["brokers"] if self.joined is not None else node.peer_addresses
        self.peers = {broker: address for broker, address in known.items() if broker != self.node_id}
        self.hub = RaftHub(
            self.node_id, node.raft_address, self.peers, node.raft_secret,
            on_message=self.loop.on_message, on_peer_connected=self.loop.on_peer_connected,
            on_peer_disconnected=self.loop.on_peer_disconnected, frame_bytes_max=s.frame_bytes_max,
            send_buffer_bytes_max=s.send_buffer_bytes_max, connect_retry_ms=s.connect_retry_ms,
            handshake_timeout_ms=s.handshake_timeout_ms, handshakes_pending_max=s.handshakes_pending_max,
            handshakes_pending_per_address_max=s.handshakes_pending_per_address_max,
            tls=raft_tls(s.tls_cert_file, s.tls_key_file, s.tls_ca_file), accepted_secrets=node.raft_accepted_secrets,
            reuse_port=node.listen_reuse_port)
        self.loop.attach(self.hub)
        self.hub.start()
        self.disk.check()
        self.faults = FaultWatch(self.disk, self.loop.groups, broker_group=METADATA_GROUP)
        storage = self.settings.storage
        pin_malloc_mmap_threshold(storage.malloc_mmap_threshold_bytes)  # before stores open and close (heap.py)
        hold_malloc_trim_threshold(storage.malloc_trim_threshold_bytes)  # free heap kept for the next batch (heap.py)
        self.heap = FrozenHeap(storage.gc_drops_collect_fraction)  # short collector pauses with many replicas
        self.heap_trimmer = HeapTrimmer(storage.malloc_trim_interval_ms)  # free heap pages go back (heap.py)
        self.loop.stopped_listeners.append(self.faults.on_group_stopped)
        self.loop.quiescence = Quiescence(self.loop, self.hub, self.node_id, s.quiesce, excluded={METADATA_GROUP})
        self.loop.stopped_listeners.append(self.loop.quiescence.on_group_stopped)

    def _open_metadata(self) -> None:
        """The metadata store and group, and the leader gossip that reports the store's damage if any."""
        meta_dir = self.data_dir / "metadata"
        self.leaders = LeaderTable(stale_after_s=self.settings.leadership.leaders_stale_after_s)
        self.gossip = Gossip(self.node_id, self.settings.leadership, loop=self.loop, hub=self.hub,
                             leaders=self.leaders, faults=self.faults, stopping=self.stopping)
        self.metadata_store = LmdbStore(str(meta_dir / "store"), tables=MetadataStateMachine.TABLES,
                                        map_size_bytes=self.settings.storage.storage_map_size_bytes)
        self.metadata_sm = MetadataStateMachine(self.metadata_store)
        check_on_open(METADATA_GROUP, self.metadata_sm, self.metadata_store,
                      self.settings.storage.storage_verify_on_open_bytes_max, self.gossip.on_store_damaged)
        joined = self.joined
        self.metadata_group = RaftGroup(
            METADATA_GROUP, self.metadata_sm, self.metadata_store, hub=self.hub, loop=self.loop,
            self_id=self.node_id, peer_ids=sorted(joined["voters"] if joined else self.peers),
            data_dir=meta_dir / "raft", settings=self.settings.raft.group,
            learner_ids=joined["learners"] if joined else (), eager_commit_notify=True, disk=self.disk)

    def _assemble(self) -> None:
        """The context, every feature and the replica set, their tasks and listeners on the loop."""
        self.context = BrokerContext(
            node_id=self.node_id, clock=self.clock, metadata_sm=self.metadata_sm, metadata_group=self.metadata_group,
            commit_timeout_ms=self.settings.log.produce_timeout_ms, leaders=self.leaders,
            alive=lambda: set(self.hub.connected_peers()), run_on_loop=self.loop.call,
            on_store_rebuilt=self.gossip.on_store_rebuilt)
        files = ReplicaFiles(self.data_dir / "partitions", node_id=self.node_id, hub=self.hub, loop=self.loop,
                             raft_settings=self.settings.raft.group, storage_settings=self.settings.storage,
                             open_stores=self.open_stores, open_journals=self.open_journals, disk=self.disk,
                             election_timeout_max_ms=self.settings.raft.group.election_timeout_max_ms,
                             on_store_damaged=self.gossip.on_store_damaged)
        files.clear_interrupted_deletions()
        registry = self.registry
        registry.on_applied(self.group_commit.mark)
        registry.thread("raftbus-group-commit", self.group_commit.run)
        registry.thread("raftbus-heap-trim", self.heap_trimmer.run)
        self.metrics.register(registry)
        self.features, self.replicas = assemble(
            self.settings, registry, self.context, files, loop=self.loop,
            opener=ThreadPoolExecutor(max_workers=1, thread_name_prefix="raftbus-replica-opener"),
            faults=self.faults, heap=self.heap, group_commit=self.group_commit, stopping=self.stopping,
            bounded_start=self.settings.raft.quiesce.enabled, data_dir=self.data_dir,
            process_stats=ProcessStats(self.loop, self.group_commit, self.faults, self.heap_trimmer),
            metrics_url=lambda: self.metrics.url,
            raft_peers=RaftPeers(self.context, self.peers, self.hub.set_peers))
        self.gossip.register(registry)
        self.placement = LeaderPlacement(self.context, self.settings.leadership, hub=self.hub, faults=self.faults)
        self.placement.register(registry)
        self.loop.add_group(self.metadata_group)
        self.loop.on_control = self.gossip.on_control
        self.loop.peer_listeners.append(self.gossip.on_peer)
        registry.install(self.loop)

    def _serve(self) -> None:
        g = self.settings.grpc
        self.server, self.health, self.grpc_port = build_server(
            self.settings.node.listen, self.registry.servicers, workers_max=g.grpc_workers_max,
            message_bytes_max=g.grpc_message_bytes_max, concurrent_rpcs_max=g.grpc_concurrent_rpcs_max,
            long_calls=g.long_call_slots(), credentials=self.features.security.server_credentials(),
            interceptors=self.registry.interceptors, connections_max=g.grpc_connections_max,
            handshake_timeout_ms=g.grpc_handshake_timeout_ms, reuse_port=self.settings.node.listen_reuse_port)
        self.server.start()
        self.address_bound = AddressBound(self.grpc_port, g.grpc_connections_per_address_max,
                                          host=parse_address(self.settings.node.listen)[0])
        self.address_bound.start()

    # ------------------------------------------------------------------ stop
    def stop(self) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.context.stopping.set()
        self.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        self.placement.hand_off(self.loop, self.settings.node.shutdown_timeout_ms / 2000, tell=self.gossip.round)
        self.server.stop(grace=1.0).wait(2.0)
        self.address_bound.stop()
        self.metrics.stop()
        self.registry.close()
        self.replicas.close()  # an open in progress finishes; none starts
        self.loop.stop()
        self.hub.close()
        self.registry.join_threads(1.0)
        for replica in list(self.context.partitions.values()):
            replica.store.sync()
            replica.store.close()
        self.metadata_store.sync()
        self.metadata_store.close()
        self.boot.stopped_cleanly()
        log.info("broker stopped", extra={"node_id": self.node_id})
