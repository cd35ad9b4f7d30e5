"""The Kafka port as a part of the broker: its listener, its router with every API it serves, and what it
registers with the assembly (start once the client port serves, stop with the broker, and the Raft loop's "a group
applied something" for waiting fetches).

The API table is the one place that says which API keys and versions the port serves; ApiVersions answers
exactly it. Kafka 4.x baselines: Produce from v3, Fetch from v4. Fetch stops at v12 and DeleteTopics at v5
(later versions name topics by id); ListOffsets stops at v6 (v7 adds the max-timestamp query).
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from raftbus.broker.groups.consumer_service import ConsumerProtocolService
from raftbus.broker.groups.coordinator import ClassicCoordinator, CoordinatorSettings
from raftbus.broker.groups.offset_forwarder import OffsetForwarder
from raftbus.broker.groups.settings import GroupSettings
from raftbus.broker.kafka.apis import cluster, configs, consumer_groups, fetch, group_offsets, groups, metadata
from raftbus.broker.kafka.apis import offsets, produce, producer_ids, sasl, topics, versions
from raftbus.broker.kafka.fetch_sessions import FetchSessions
from raftbus.broker.kafka.listener import KafkaLimits, KafkaListener
from raftbus.broker.kafka.router import Api, Router
from raftbus.broker.kafka.services import FetchWaits, KafkaServices
from raftbus.broker.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PortSettings:
    """What the Kafka handlers read of the broker's settings, from the sections that own each value."""

    kafka: KafkaSettings
    node_id: int
    cluster_id: str
    auth_enabled: bool
    produce_timeout_ms: int
    fetch_bytes_max: int
    fetch_wait_max_ms: int
    batch_bytes_max: int
    default_partitions: int
    default_replication_factor: int
    default_retention_ms: int
    default_retention_bytes: int
    groups: GroupSettings = GroupSettings()
    client_address: str = ""  # this broker's client port (its offset calls to other brokers start there)
    listen_reuse_port: bool = False  # the node's: the Kafka port binds beside a port held for this broker

    @classmethod
    def of(cls, settings) -> "PortSettings":
        """From a BrokerSettings."""
        log, topics_ = settings.log, settings.topics
        return cls(kafka=settings.kafka, node_id=settings.node.node_id, cluster_id=settings.node.cluster_id,
                   auth_enabled=settings.security.auth_enabled, produce_timeout_ms=log.produce_timeout_ms,
                   fetch_bytes_max=log.fetch_bytes_max, fetch_wait_max_ms=log.fetch_wait_max_ms,
                   batch_bytes_max=log.batch_bytes_max, default_partitions=topics_.default_partitions,
                   default_replication_factor=topics_.default_replication_factor,
                   default_retention_ms=topics_.default_retention_ms,
                   default_retention_bytes=topics_.default_retention_bytes, groups=settings.groups,
                   client_address=settings.node.client_address, listen_reuse_port=settings.node.listen_reuse_port)

    def coordinator(self) -> CoordinatorSettings:
        g, k = self.groups, self.kafka
        return CoordinatorSettings(session_timeout_min_ms=g.session_timeout_min_ms,
                                   session_timeout_max_ms=g.session_timeout_max_ms,
                                   group_members_max=g.group_members_max, groups_max=g.groups_max,
                                   initial_rebalance_delay_ms=k.kafka_group_initial_rebalance_delay_ms,
                                   state_bytes_max=k.kafka_group_state_bytes_max,
                                   heartbeat_hold_ms=k.kafka_heartbeat_hold_ms,
                                   heartbeats_held_max=k.kafka_heartbeats_held_max)


def limits_of(kafka: KafkaSettings) -> KafkaLimits:
    return KafkaLimits(
        connections_max=kafka.kafka_connections_max,
        connections_per_address_max=kafka.kafka_connections_per_address_max,
        in_flight_per_connection_max=kafka.kafka_in_flight_per_connection_max,
        request_bytes_max=kafka.kafka_request_bytes_max,
        request_read_timeout_ms=kafka.kafka_request_read_timeout_ms,
        idle_ms=kafka.kafka_connection_idle_ms,
        fetch_sessions_max=kafka.kafka_fetch_sessions_max,
        unauthenticated_request_bytes_max=kafka.kafka_unauthenticated_request_bytes_max,
        authentication_timeout_ms=kafka.kafka_authentication_timeout_ms,
    )


def build_router(services: KafkaServices, sessions: FetchSessions) -> Router:
    router = Router([
        Api(0, "Produce", 3, 11, produce.handler(services)),
        Api(1, "Fetch", 4, 12, fetch.handler(services, sessions)),
        Api(2, "ListOffsets", 1, 6, offsets.handler(services)),
        Api(3, "Metadata", 0, 12, metadata.handler(services)),
        Api(8, "OffsetCommit", 2, 9, group_offsets.commit_handler(services)),
        Api(9, "OffsetFetch", 1, 9, group_offsets.fetch_handler(services)),
        Api(10, "FindCoordinator", 0, 6, groups.find_coordinator_handler(services)),
        Api(11, "JoinGroup", 0, 9, groups.join_group_handler(services)),
        Api(12, "Heartbeat", 0, 4, groups.heartbeat_handler(services)),
        Api(13, "LeaveGroup", 0, 5, groups.leave_group_handler(services)),
        Api(14, "SyncGroup", 0, 5, groups.sync_group_handler(services)),
        Api(15, "DescribeGroups", 0, 5, groups.describe_groups_handler(services)),
        Api(16, "ListGroups", 0, 5, groups.list_groups_handler(services)),
        Api(17, "SaslHandshake", 1, 1, sasl.handshake_handler(services)),
        Api(19, "CreateTopics", 2, 7, topics.create_handler(services)),
        Api(20, "DeleteTopics", 1, 5, topics.delete_handler(services)),
        Api(22, "InitProducerId", 0, 4, producer_ids.handler(services)),
        Api(32, "DescribeConfigs", 1, 4, configs.describe_handler(services)),
        Api(36, "SaslAuthenticate", 0, 2, sasl.authenticate_handler(services)),
        Api(37, "CreatePartitions", 0, 3, topics.partitions_handler(services)),
        Api(42, "DeleteGroups", 0, 2, groups.delete_groups_handler(services)),
        Api(44, "IncrementalAlterConfigs", 0, 1, configs.alter_handler(services)),
        Api(47, "OffsetDelete", 0, 0, group_offsets.delete_handler(services)),
        Api(60, "DescribeCluster", 0, 1, cluster.handler(services)),
        Api(68, "ConsumerGroupHeartbeat", 0, 1, consumer_groups.heartbeat_handler(services)),
        Api(69, "ConsumerGroupDescribe", 0, 1, consumer_groups.describe_handler(services)),
    ])
    router.apis[18] = Api(18, "ApiVersions", 0, 4, versions.handler(router))
    return router


def kafka_addresses(context) -> dict[int, str]:
    """broker id -> its Kafka port's address, from the broker registry."""
    return {b.broker_id: b.kafka_address for b in context.metadata_sm.brokers().values() if b.kafka_address}


class KafkaFeature:
    """The Kafka port of one broker; off (registers nothing) when kafka_listen is empty."""

    def __init__(self, context, settings: PortSettings, log_service, admin_service, *, group_service=None,
                 offset_service=None, policy=None, token_policy=None, ssl_context=None, certificate_rules=(),
                 peer_credentials: dict | None = None):
        self.settings = settings
        kafka = settings.kafka
        self.enabled = bool(kafka.kafka_listen)
        self.port: int | None = None
        self._ticking: asyncio.Task | None = None
        if not self.enabled:  # no loop, no thread, no socket
            return
        self.listener = KafkaListener(kafka.kafka_listen, limits_of(kafka), policy, ssl_context,
                                      reuse_port=settings.listen_reuse_port, certificate_rules=certificate_rules)
        self.waits = FetchWaits(call_soon=self.listener.call_soon)
        self.offsets = OffsetForwarder(context, offset_service, timeout_ms=settings.produce_timeout_ms,
                                       client_address=settings.client_address, credentials=peer_credentials)
        self.coordinator = ClassicCoordinator(context, settings.coordinator())
        self.services = KafkaServices(
            context=context, log=log_service, admin=admin_service, listener=self.listener, waits=self.waits,
            settings=settings, kafka_addresses=lambda: kafka_addresses(context), cluster_id=settings.cluster_id,
            coordinator=self.coordinator, group_service=group_service, offsets=self.offsets,
            consumer_groups=ConsumerProtocolService(context, settings.groups, group_service.heartbeats)
            if group_service is not None else None,
            group_settings=settings.groups, token_policy=token_policy,
            offset_executor=ThreadPoolExecutor(max_workers=kafka.kafka_offset_calls_max,
                                               thread_name_prefix="raftbus-kafka-offsets"))
        self.listener.router = build_router(self.services, FetchSessions(kafka.kafka_fetch_sessions_max))

    @property
    def address(self) -> str:
        """This broker's Kafka address as clients dial it (the bound port when kafka_listen asked for port 0)."""
        if not self.enabled:
            return ""
        host, _, port = self.settings.kafka.kafka_address.rpartition(":")
        return f"{host}:{self.port}" if port == "0" and self.port else self.settings.kafka.kafka_address

    def register(self, registry) -> None:
        if not self.enabled:
            return
        registry.on_applied(self.on_applied)
        registry.on_start(self.start)
        registry.on_close(self.stop)

    def start(self) -> None:
        self.port = self.listener.start(f"raftbus-kafka-{self.settings.node_id}")
        self.listener.call_soon(self._start_ticking)

    def _start_ticking(self) -> None:
        self._ticking = self.listener.loop.create_task(self._tick_forever())

    async def _tick_forever(self) -> None:
        """The classic coordinator's periodic check, on the listener's loop (group_expiry_check_interval_ms)."""
        interval_s = self.settings.groups.group_expiry_check_interval_ms / 1000
        while True:
            try:
                await self.coordinator.tick()
            except Exception:
                log.exception("kafka group coordinator check failed")
            await asyncio.sleep(interval_s)

    def on_applied(self, group) -> None:
        """The Raft loop applied entries of `group` (waiting fetches on it wake up)."""
        self.waits.appended(group.group_id)

    def stop(self) -> None:
        self.listener.stop()
        self.services.offset_executor.shutdown(wait=False, cancel_futures=True)
        self.offsets.close()
