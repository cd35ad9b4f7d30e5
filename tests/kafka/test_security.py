"""Goal: with auth on, the Kafka port speaks SASL_SSL (the client port's certificate) and maps SASL credentials
onto raftbus tokens and ACLs, with the real clients: PLAIN and SCRAM-SHA-256/512 with a token authenticate, a
wrong password gets SASL_AUTHENTICATION_FAILED, a token with produce on topic A gets TOPIC_AUTHORIZATION_FAILED
producing to B, GROUP_AUTHORIZATION_FAILED reading in group C, and CLUSTER_AUTHORIZATION_FAILED describing the
brokers; a connection that has not authenticated is answered ApiVersions and SASL only, anything else closes it."""
from __future__ import annotations

import socket
import ssl
from contextlib import ExitStack

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from raftbus.broker.kafka.schema import make
from raftbus.client import Admin
from tests.helpers import wait_until
from tests.kafka.conftest import KafkaCluster, _all_registered
from tests.kafka_wire import parse_response, read_frame, request_frame
from tests.system.conftest import wait_cluster_ready
from tests.system.secure import admin_environment, make_secure

pytestmark = pytest.mark.kafka
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    root = tmp_path_factory.mktemp("kafka-secure")
    cluster = KafkaCluster(root)
    cluster.secure = make_secure(cluster, root)
    with ExitStack() as stack:
        stack.enter_context(admin_environment(cluster.secure))
        try:
            cluster.start()
            wait_cluster_ready(cluster)
            wait_until(lambda: _all_registered(cluster), 30, 0.2, what="every broker's kafka_address registered")
            with Admin(cluster.bootstrap) as admin:
                for name in ("topic-a", "topic-b"):
                    admin.create_topic(name, partitions=1, replication_factor=3)
                writer = admin.create_token("writer")["token"]
                admin.grant_acl("writer", operation="produce", topic="topic-a")
                admin.grant_acl("writer", operation="consume", topic="topic-a")
            cluster.writer_token = writer
            yield cluster
        finally:
            cluster.stop()


def _config(cluster, user: str, password: str, mechanism: str = "PLAIN") -> dict:
    return {"bootstrap.servers": cluster.kafka_bootstrap, "security.protocol": "SASL_SSL",
            "ssl.ca.location": cluster.secure.ca, "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}


def _produce(config: dict, topic: str) -> KafkaError | None:
    outcome = []
    producer = Producer({**config, "acks": "all", "message.timeout.ms": 15000})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(30)
    assert len(outcome) == 1
    return outcome[0]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_token_authenticates_with_each_mechanism_and_produces_where_its_acl_allows(secure, mechanism):
    config = _config(secure, "writer", secure.writer_token, mechanism)
    assert _produce(config, "topic-a") is None
    refused = _produce(config, "topic-b")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_gets_sasl_authentication_failed(secure, mechanism):
    """Goal: librdkafka reports the authentication failure with the broker's message, for every mechanism."""
    reported = []
    producer = Producer({**_config(secure, "writer", "rbt_wrong", mechanism), "error_cb": reported.append})
    failed = lambda: [e for e in reported if e.code() == KafkaError._AUTHENTICATION]  # noqa: E731
    wait_until(lambda: producer.poll(0.2) >= 0 and failed(), 30, 0,
               what="an authentication error")
    assert "authentication failed for user 'writer'" in failed()[0].str()


def test_a_wrong_password_is_answered_sasl_authentication_failed_then_closed(secure):
    """Goal: on the wire, SaslAuthenticate with a wrong token answers SASL_AUTHENTICATION_FAILED (58) and the
    broker closes the connection."""
    with _tls_socket(secure) as sock:
        sock.sendall(request_frame(17, 1, 1, make(SaslHandshakeRequest, {"mechanism": "PLAIN"})))
        assert parse_response(17, 1, read_frame(sock))[1].error_code == 0
        sock.sendall(request_frame(36, 2, 2, make(SaslAuthenticateRequest, {"auth_bytes": b"\x00writer\x00rbt_x"})))
        answer = parse_response(36, 2, read_frame(sock))[1]
        assert answer.error_code == 58 and "authentication failed" in answer.error_message
        with pytest.raises((ConnectionError, ssl.SSLError)):
            read_frame(sock)


def _tls_socket(secure) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=secure.secure.ca)
    context.check_hostname = False
    raw = socket.create_connection(("127.0.0.1", secure.kafka_ports[0]), timeout=10)
    return context.wrap_socket(raw)


def test_reading_in_a_group_without_its_acl_gets_group_authorization_failed(secure):
    consumer = Consumer({**_config(secure, "writer", secure.writer_token), "group.id": "group-c",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["topic-a"])
    errors = []
    try:
        def refused():
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                errors.append(message.error().code())
            return KafkaError.GROUP_AUTHORIZATION_FAILED in errors
        wait_until(refused, 30, 0, what="GROUP_AUTHORIZATION_FAILED")
    finally:
        consumer.close()


def test_describing_the_brokers_and_creating_topics_need_the_cluster(secure):
    admin = AdminClient(_config(secure, "writer", secure.writer_token))
    described = admin.describe_configs([ConfigResource("BROKER", "1")])
    with pytest.raises(KafkaException) as broker:
        list(described.values())[0].result(15)
    assert broker.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    from confluent_kafka.admin import NewTopic
    with pytest.raises(KafkaException) as create:
        admin.create_topics([NewTopic("topic-new", 1, 3)])["topic-new"].result(15)
    assert create.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_token_of_read_access_reads_in_its_group(secure):
    with Admin(secure.bootstrap) as admin:
        token = admin.create_token("reader")["token"]
        admin.grant_acl("reader", operation="consume", topic="topic-a")
        admin.grant_acl("reader", operation="consume", group="group-r")
    assert _produce(_config(secure, "writer", secure.writer_token, "SCRAM-SHA-512"), "topic-a") is None
    consumer = Consumer({**_config(secure, "reader", token, "SCRAM-SHA-512"), "group.id": "group-r",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["topic-a"])
    try:
        message = wait_until(lambda: consumer.poll(0.5), 60, 0, what="a record read in group-r")
        assert message.error() is None and message.value() == b"v"
        consumer.commit(message, asynchronous=False)
    finally:
        consumer.close()


def test_kafka_python_authenticates_with_scram_over_tls(secure):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=secure.kafka_bootstrap.split(","), security_protocol="SASL_SSL",
                             ssl_cafile=secure.secure.ca, sasl_mechanism="SCRAM-SHA-256",
                             sasl_plain_username="writer", sasl_plain_password=secure.writer_token)
    try:
        assert producer.send("topic-a", b"kp").get(timeout=30).topic == "topic-a"
    finally:
        producer.close()


def test_an_unauthenticated_connection_gets_api_versions_only(secure):
    """Goal: over TLS without SASL, ApiVersions is answered and Metadata closes the connection."""
    with _tls_socket(secure) as sock:
        sock.sendall(request_frame(18, 3, 1, ApiVersionsRequest(client_software_name="t",
                                                                client_software_version="1")))
        assert parse_response(18, 3, read_frame(sock))[1].error_code == 0
        sock.sendall(request_frame(3, 12, 2, make(MetadataRequest, {"topics": None})))
        with pytest.raises((ConnectionError, ssl.SSLError)):
            read_frame(sock)


def test_a_plaintext_client_cannot_reach_the_tls_port(secure):
    producer_error = []
    admin = AdminClient({"bootstrap.servers": secure.kafka_bootstrap, "error_cb": producer_error.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
