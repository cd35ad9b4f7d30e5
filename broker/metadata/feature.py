"""The metadata group as a part of the broker: the Admin, Integrity and Membership services and servicers; the
controller promotes caught-up metadata learners and advances decommissions, partition leaders take the steps of
their reassignments, the Raft transport dials every registered broker, and a thread keeps this broker registered."""
from __future__ import annotations

from collections.abc import Callable

from raftbus.broker.context import BrokerContext
from raftbus.broker.metadata.decommission import Decommissions
from raftbus.broker.metadata.integrity import integrity_servicers
from raftbus.broker.metadata.membership_servicer import membership_servicers
from raftbus.broker.metadata.raft_peers import RaftPeers
from raftbus.broker.metadata.reassignment_driver import Reassigner
from raftbus.broker.metadata.registration import BrokerRegistration
from raftbus.broker.metadata.service import AdminService
from raftbus.broker.metadata.servicer import admin_servicers
from raftbus.broker.metadata.settings import MembershipSettings, TopicSettings
from raftbus.broker.metadata.voters import MembershipService

RAFT_PEERS_CHECK_INTERVAL_MS = 50


class MetadataFeature:
    def __init__(self, context: BrokerContext, topics: TopicSettings, membership: MembershipSettings,
                 queue_settings, *, client_address: str, raft_address: str, fetch_wait_max_ms: int,
                 process_stats: Callable[[], dict] = dict, metrics_url: Callable[[], str] = str,
                 kafka_address: Callable[[], str] = str, raft_peers: RaftPeers | None = None,
                 cluster_id: str = ""):
        self.context = context
        self.settings = membership
        self.fetch_wait_max_ms = fetch_wait_max_ms  # the longest a MetadataDigest call waits for an index
        self.admin = AdminService(context, topics, queue_settings, process_stats, cluster_id)
        self.membership = MembershipService(context, membership, raft_peers)
        self.decommissions = Decommissions(context, membership)
        self.reassigner = Reassigner(context, membership)
        self.registration = BrokerRegistration(context, self.admin.register_broker, client_address=client_address,
                                               raft_address=raft_address, metrics_url=metrics_url,
                                               kafka_address=kafka_address)
        self.raft_peers = raft_peers  # None without a Raft transport (component tests)

    def register(self, registry) -> None:
        registry.serve(admin_servicers(self.admin))
        registry.serve(integrity_servicers(self.context, self.fetch_wait_max_ms))  # raftbus cluster verify
        registry.serve(membership_servicers(self.membership, self.decommissions))
        if self.raft_peers is not None:
            registry.every("raft peers", RAFT_PEERS_CHECK_INTERVAL_MS, self.raft_peers.sync)
        interval_ms = self.settings.membership_check_interval_ms
        registry.every("metadata learner promotion", interval_ms, self.membership.promote_caught_up)
        registry.every("reassignment steps", interval_ms, self.reassigner.advance)
        registry.every("decommission steps", interval_ms, self.decommissions.advance)
        registry.thread("raftbus-register", self.registration.run)
