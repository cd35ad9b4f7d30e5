"""Goal: with mutual TLS (`tls_client_ca_file`) and auth on, a Kafka client's certificate names its principal on the
Kafka port exactly as on the client port (through `tls_principal_rules`): confluent-kafka over SSL with the
certificate of `writer` produces where writer's ACL allows and gets TOPIC_AUTHORIZATION_FAILED elsewhere; a
certificate no rule maps names no one, so its connection is closed at its first request past ApiVersions; a
client without a certificate does not get through the handshake."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from raftbus.broker.tls_dev import secure_broker_env, write_dev_pki, write_token_file
from raftbus.client import Admin
from tests.helpers import wait_until
from tests.kafka.conftest import KafkaCluster
from tests.system.secure import cluster_credentials

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def mutual(tmp_path_factory):
    root = tmp_path_factory.mktemp("kafka-mtls")
    pki = write_dev_pki(root / "tls", [1], clients=("admin", "writer", "other"))
    token_file = root / "admin.token"
    token = write_token_file(token_file)
    cluster = KafkaCluster(root, brokers=1)
    broker = cluster.brokers[0]
    broker.env = {**broker.env, **cluster_credentials(), **secure_broker_env(pki, 1, token_file),
                  "RAFTBUS_TLS_CLIENT_CA_FILE": str(pki.ca_file),
                  "RAFTBUS_TLS_PRINCIPAL_RULES": "RULE:^CN=(writer)$/$1/"}
    cert, key = pki.client("admin")
    cluster.admin = {"tls_ca": str(pki.ca_file), "tls_cert": str(cert), "tls_key": str(key), "token": token}
    cluster.pki = pki
    try:
        cluster.start()
        wait_until(lambda: _ready(cluster), 60, 0.2, what="the broker ready and its Kafka address registered")
        with Admin(cluster.bootstrap, **cluster.admin) as admin:
            admin.create_topic("mtls-a", partitions=1, replication_factor=1)
            admin.create_topic("mtls-b", partitions=1, replication_factor=1)
            admin.grant_acl("writer", operation="produce", topic="mtls-a")
            admin.grant_acl("other", operation="produce", topic="mtls-a")  # its certificate must not name it
        yield cluster
    finally:
        cluster.stop()


def _ready(cluster) -> bool:
    with Admin(cluster.bootstrap, **cluster.admin) as admin:
        status = admin.cluster_status()
        return bool(status.controller_id) and all(b.kafka_address for b in status.brokers)


def _produce(cluster, topic: str, **config) -> KafkaError | None:
    outcome = []
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "security.protocol": "SSL",
                         "ssl.ca.location": str(cluster.pki.ca_file), "message.timeout.ms": 15000, **config})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(30)
    assert len(outcome) == 1
    return outcome[0]


def test_a_client_certificate_names_the_principal(mutual):
    cert, key = mutual.pki.client("writer")
    identity = {"ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    assert _produce(mutual, "mtls-a", **identity) is None
    refused = _produce(mutual, "mtls-b", **identity)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_certificate_no_rule_maps_names_no_one(mutual):
    cert, key = mutual.pki.client("other")
    refused = _produce(mutual, "mtls-a", **{"ssl.certificate.location": str(cert), "ssl.key.location": str(key),
                                            "message.timeout.ms": 3000})  # every connection is closed: it times out
    assert refused is not None and refused.code() != KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_client_without_a_certificate_is_refused_at_the_handshake(mutual):
    admin = AdminClient({"bootstrap.servers": mutual.kafka_bootstrap, "security.protocol": "SSL",
                         "ssl.ca.location": str(mutual.pki.ca_file)})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
