"""Fixtures of the kafka tier: real 3-broker clusters with their Kafka port on, driven by the real Kafka clients
(confluent-kafka, kafka-python, aiokafka) and kcat. One cluster per module, stopped by pid at the end."""
from __future__ import annotations

import shutil
import time
from contextlib import contextmanager

import pytest

from tests.helpers import LocalCluster, wait_until
from tests.system.conftest import wait_cluster_ready

pytestmark = pytest.mark.kafka


class KafkaCluster(LocalCluster):
    """A LocalCluster whose brokers also listen for Kafka clients (RAFTBUS_KAFKA_LISTEN per broker)."""

    def __init__(self, root, brokers: int = 3, env: dict | None = None):
        super().__init__(root, brokers=brokers, env=env)
        self.kafka_ports = self.hold_ports(brokers)  # held with the cluster's ports, kept across restarts
        for broker, port in zip(self.brokers, self.kafka_ports):
            broker.env = {**broker.env, "RAFTBUS_KAFKA_LISTEN": f"127.0.0.1:{port}"}

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.kafka_ports)

    def kafka_address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.kafka_ports[node_id - 1]}"


@contextmanager
def kafka_cluster(root, env: dict | None = None):
    cluster = KafkaCluster(root, env=env)
    try:
        cluster.start()
        wait_cluster_ready(cluster)
        wait_until(lambda: _all_registered(cluster), 30, 0.2, what="every broker's kafka_address registered")
        yield cluster
    finally:
        cluster.stop()


def _all_registered(cluster: KafkaCluster) -> bool:
    from raftbus.client import Admin

    with Admin(cluster.bootstrap) as admin:
        return all(b.kafka_address for b in admin.cluster_status().brokers)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with kafka_cluster(tmp_path_factory.mktemp("kafka")) as running:
        yield running


def create_topic(cluster: KafkaCluster, name: str, partitions: int = 3, replication_factor: int = 3,
                 config: dict | None = None) -> None:
    """Create a topic through the Kafka port (confluent-kafka's AdminClient) and wait until every partition has
    a leader that Kafka clients can reach."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    admin.create_topics([NewTopic(name, partitions, replication_factor, config=config or {})])[name].result(30)
    wait_until(lambda: _leaders_known(admin, name, partitions), 30, 0.1, what=f"leaders of {name}")


def _leaders_known(admin, name: str, partitions: int) -> bool:
    topic = admin.list_topics(name, timeout=5).topics[name]
    return topic.error is None and len(topic.partitions) == partitions and \
        all(p.leader >= 0 and p.error is None for p in topic.partitions.values())


def consume_all(bootstrap: str, topic: str, partitions, expected: int, timeout_s: float = 30.0, **config) -> list:
    """Every record of `partitions` from the beginning through confluent-kafka, until `expected` arrived."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafka-tier", "enable.auto.commit": False,
                         **config})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    got, deadline = [], time.monotonic() + timeout_s
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                got.append(message)
    finally:
        consumer.close()
    return got


def kcat() -> str:
    path = shutil.which("kcat")
    assert path, "kcat is not installed: `make test` installs it from Debian (the kafka-tools target)"
    return path
