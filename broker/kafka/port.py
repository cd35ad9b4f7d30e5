"""The Kafka port of one broker: its listener, its router with every API it serves, and the hooks the broker's
assembly wires (start, stop, and the Raft loop's "a group applied something" for waiting fetches).

The API table is the one place that says which API keys and versions the port serves; ApiVersions answers
exactly it. Kafka 4.x baselines: Produce from v3, Fetch from v4. Fetch stops at v12 and DeleteTopics at v5
(later versions name topics by id); ListOffsets stops at v6 (v7 adds the max-timestamp query).
"""
from __future__ import annotations

from raftbus.broker.kafka.apis import cluster, configs, fetch, metadata, offsets, produce, producer_ids, topics
from raftbus.broker.kafka.apis import versions
from raftbus.broker.kafka.fetch_sessions import FetchSessions
from raftbus.broker.kafka.listener import KafkaLimits, KafkaListener
from raftbus.broker.kafka.router import Api, Router
from raftbus.broker.kafka.services import FetchWaits, KafkaServices


def limits_of(settings) -> KafkaLimits:
    return KafkaLimits(
        connections_max=settings.kafka_connections_max,
        in_flight_per_connection_max=settings.kafka_in_flight_per_connection_max,
        request_bytes_max=settings.kafka_request_bytes_max,
        request_read_timeout_ms=settings.kafka_request_read_timeout_ms,
        idle_ms=settings.kafka_connection_idle_ms,
        decompressed_batch_bytes_max=settings.kafka_batch_decompressed_bytes_max,
        fetch_sessions_max=settings.kafka_fetch_sessions_max,
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


class KafkaPort:
    def __init__(self, context, log_service, admin_service, *, kafka_addresses, policy=None):
        settings = context.settings
        self.listener = KafkaListener(settings.kafka_listen, limits_of(settings), policy)
        self.waits = FetchWaits(call_soon=self.listener.call_soon)
        self.services = KafkaServices(context=context, log=log_service, admin=admin_service,
                                      listener=self.listener, waits=self.waits, kafka_addresses=kafka_addresses,
                                      cluster_id=settings.cluster_id)
        self.listener.router = build_router(self.services, FetchSessions(settings.kafka_fetch_sessions_max))

    def start(self, name: str) -> int:
        return self.listener.start(name)

    def on_applied(self, group) -> None:
        """The Raft loop applied entries of `group` (waiting fetches on it wake up)."""
        self.waits.appended(group.group_id)

    def stop(self) -> None:
        self.listener.stop()
