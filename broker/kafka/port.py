"""The Kafka port as a part of the broker: its listener, its router with every API it serves, and what it
registers with the assembly (start once the client port serves, stop with the broker, and the Raft loop's "a group
applied something" for waiting fetches).

The API table is the one place that says which API keys and versions the port serves; ApiVersions answers
exactly it. Kafka 4.x baselines: Produce from v3, Fetch from v4. Fetch stops at v12 and DeleteTopics at v5
(later versions name topics by id); ListOffsets stops at v6 (v7 adds the max-timestamp query).
"""
from __future__ import annotations

from dataclasses import dataclass

from raftbus.broker.kafka.apis import cluster, configs, fetch, metadata, offsets, produce, producer_ids, topics
from raftbus.broker.kafka.apis import versions
from raftbus.broker.kafka.fetch_sessions import FetchSessions
from raftbus.broker.kafka.listener import KafkaLimits, KafkaListener
from raftbus.broker.kafka.router import Api, Router
from raftbus.broker.kafka.services import FetchWaits, KafkaServices
from raftbus.broker.kafka.settings import KafkaSettings


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
                   default_retention_bytes=topics_.default_retention_bytes,
                   listen_reuse_port=settings.node.listen_reuse_port)


def limits_of(kafka: KafkaSettings) -> KafkaLimits:
    return KafkaLimits(
        connections_max=kafka.kafka_connections_max,
        connections_per_address_max=kafka.kafka_connections_per_address_max,
        unauthenticated_request_bytes_max=kafka.kafka_unauthenticated_request_bytes_max,
        in_flight_per_connection_max=kafka.kafka_in_flight_per_connection_max,
        request_bytes_max=kafka.kafka_request_bytes_max,
        request_read_timeout_ms=kafka.kafka_request_read_timeout_ms,
        idle_ms=kafka.kafka_connection_idle_ms,
        fetch_sessions_max=kafka.kafka_fetch_sessions_max,
    )


def build_router(services: KafkaServices, sessions: FetchSessions) -> Router:
    router = Router([
        Api(0, "Produce", 3, 11, produce.handler(services)),
        Api(1, "Fetch", 4, 12, fetch.handler(services, sessions)),
        Api(2, "ListOffsets", 1, 6, offsets.handler(services)),
        Api(3, "Metadata", 0, 12, metadata.handler(services)),
        Api(19, "CreateTopics", 2, 7, topics.create_handler(services)),
        Api(20, "DeleteTopics", 1, 5, topics.delete_handler(services)),
        Api(22, "InitProducerId", 0, 4, producer_ids.handler(services)),
        Api(32, "DescribeConfigs", 1, 4, configs.describe_handler(services)),
        Api(37, "CreatePartitions", 0, 3, topics.partitions_handler(services)),
        Api(44, "IncrementalAlterConfigs", 0, 1, configs.alter_handler(services)),
        Api(60, "DescribeCluster", 0, 1, cluster.handler(services)),
    ])
    router.apis[18] = Api(18, "ApiVersions", 0, 4, versions.handler(router))
    return router


def kafka_addresses(context) -> dict[int, str]:
    """broker id -> its Kafka port's address, from the broker registry."""
    return {b.broker_id: b.kafka_address for b in context.metadata_sm.brokers().values() if b.kafka_address}


class KafkaFeature:
    """The Kafka port of one broker; off (registers nothing) when kafka_listen is empty."""

    def __init__(self, context, settings: PortSettings, log_service, admin_service, *, policy=None):
        self.settings = settings
        kafka = settings.kafka
        self.enabled = bool(kafka.kafka_listen)
        self.port: int | None = None
        if not self.enabled:  # no loop, no thread, no socket
            return
        self.listener = KafkaListener(kafka.kafka_listen, limits_of(kafka), policy,
                                      reuse_port=settings.listen_reuse_port)
        self.waits = FetchWaits(call_soon=self.listener.call_soon)
        self.services = KafkaServices(context=context, log=log_service, admin=admin_service, listener=self.listener,
                                      waits=self.waits, settings=settings,
                                      kafka_addresses=lambda: kafka_addresses(context),
                                      cluster_id=settings.cluster_id)
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

    def on_applied(self, group) -> None:
        """The Raft loop applied entries of `group` (waiting fetches on it wake up)."""
        self.waits.appended(group.group_id)

    def stop(self) -> None:
        self.listener.stop()
