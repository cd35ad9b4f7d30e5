"""What a broker is made of above Raft and files: every feature built over the context with its own settings
section and what it is given of the others, and the replica set; each registers its tasks, threads, servicers and
listeners. broker/server.py calls `assemble` with the Raft loop and LMDB replicas, the component harness with an
in-process loop and memory replicas: one assembly for both. A new feature is one field of `Features` and one line
of `build_features`, with its section one field of BrokerSettings."""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from pathlib import Path

from raftbus.broker.context import BrokerContext
from raftbus.broker.groups.feature import GroupsFeature
from raftbus.broker.kafka.port import KafkaFeature, PortSettings
from raftbus.broker.log.feature import LogFeature
from raftbus.broker.metadata.feature import MetadataFeature
from raftbus.broker.metadata.raft_peers import RaftPeers
from raftbus.broker.queues.feature import QueuesFeature
from raftbus.broker.raft.starting import StartingReplicas
from raftbus.broker.registry import Registry
from raftbus.broker.replicas import ReplicaSet
from raftbus.broker.security.wiring import ClientPortSecurity
from raftbus.broker.settings import BrokerSettings


@dataclass
class Features:
    """The parts of a broker over its context: what the client port serves and what runs beside it."""

    security: ClientPortSecurity
    metadata: MetadataFeature
    log: LogFeature
    groups: GroupsFeature
    queues: QueuesFeature
    kafka: KafkaFeature

    def register(self, registry: Registry) -> None:
        """Each feature registers its own, in the order of the fields."""
        for part in dataclasses.fields(self):
            getattr(self, part.name).register(registry)


def build_features(context: BrokerContext, settings: BrokerSettings, *, data_dir: Path, process_stats=dict,
                   metrics_url=str, raft_peers: RaftPeers | None = None) -> Features:
    """Every feature with its own settings section and what it is given of the others."""
    node = settings.node
    security = ClientPortSecurity(context, settings.security, node.cluster_keys, node.accepted_cluster_keys)
    credentials = security.peer_credentials()
    kafka: list[KafkaFeature] = []  # its address is registered by the metadata feature, built first
    log = LogFeature(context, settings.log, rebuild_dir=data_dir / "rebuild", peer_credentials=credentials)
    metadata = MetadataFeature(context, settings.topics, settings.membership, settings.queues,
                               client_address=node.client_address, raft_address=node.raft_listen,
                               fetch_wait_max_ms=settings.log.fetch_wait_max_ms,
                               process_stats=lambda: {**process_stats(), **log.compaction_stats()},
                               metrics_url=metrics_url, kafka_address=lambda: kafka[0].address if kafka else "",
                               raft_peers=raft_peers, cluster_id=node.cluster_id)
    groups = GroupsFeature(context, settings.groups)
    kafka.append(KafkaFeature(context, PortSettings.of(settings), log.service, metadata.admin,
                              group_service=groups.service, offset_service=groups.offsets,
                              policy=security.policy(), token_policy=security.token_policy(),
                              ssl_context=security.kafka_ssl_context() if settings.kafka.kafka_listen else None,
                              certificate_rules=security.certificate_rules(),
                              peer_credentials=credentials))
    return Features(
        security=security,
        metadata=metadata,
        log=log,
        groups=groups,
        queues=QueuesFeature(context, settings.queues, settings.log,
                             history_keys=[keys.queue_history for keys in (node.cluster_keys,
                                                                           *node.accepted_cluster_keys)],
                             client_address=node.client_address, peer_credentials=credentials),
        kafka=kafka[0],
    )


def assemble(settings: BrokerSettings, registry: Registry, context: BrokerContext, files, *, loop, opener, faults,
             heap, group_commit, stopping: threading.Event, bounded_start: bool, data_dir: Path, **given):
    """The features and the replica set of a broker, registered: (Features, ReplicaSet). `files` makes a replica
    (replicas.py), `loop` runs them; `given` goes to build_features (process_stats, metrics_url, raft_peers)."""
    features = build_features(context, settings, data_dir=data_dir, **given)
    starting = StartingReplicas(settings.raft.replicas_starting_max, settings.raft.replica_starting_timeout_ms)
    replicas = ReplicaSet(context, files, loop=loop, opener=opener, starting=starting, faults=faults, heap=heap,
                          group_commit=group_commit, stopping=stopping, bounded_start=bounded_start,
                          free_check_interval_ms=settings.storage.storage_free_check_interval_ms,
                          gc_freeze_interval_ms=settings.storage.gc_freeze_interval_ms,
                          on_added=[features.queues.replica_added], on_dropped=[features.queues.replica_dropped])
    features.register(registry)
    replicas.register(registry)
    return features, replicas
