"""Goal: a broker whose client, Kafka or metrics port would listen beyond loopback and serve callers without
authenticating them refuses to start, with one InvalidArgument naming the setting, unless allow_insecure_network
is set; loopback, auth_enabled and a metrics token each make the port acceptable."""
import logging

import pytest

from raftbus.broker.server import warn_exposure
from raftbus.broker.settings import load_settings
from raftbus.client import errors

OWN_SECRET = {"cluster_secret": "s" * 40, "cluster_id": "exposure-test"}
WIDE = {**OWN_SECRET, "raft_listen": "10.1.2.3:7071", "peers": "1@10.1.2.3:7071"}


@pytest.mark.parametrize("overrides, named", [
    ({"listen": "0.0.0.0:7070"}, "listen=0.0.0.0:7070"),
    ({"listen": "10.1.2.3:7070"}, "listen=10.1.2.3:7070"),
    ({"listen": "[::]:7070"}, "listen=[::]:7070"),
    ({"listen": "broker-1.example:7070"}, "listen=broker-1.example:7070"),
    ({"kafka_listen": "0.0.0.0:9092"}, "kafka_listen=0.0.0.0:9092"),
    ({"metrics_listen": "0.0.0.0:9570"}, "metrics_listen=0.0.0.0:9570"),
])
def test_a_port_beyond_loopback_without_authentication_is_refused_naming_it(overrides, named):
    with pytest.raises(errors.InvalidArgument) as refused:
        load_settings(**WIDE, **overrides)
    message = refused.value.message
    assert named in message and "allow_insecure_network" in message and "auth_enabled" in message
    assert "\n" not in message


def test_loopback_ports_need_nothing():
    """The quick start (`raftbus dev`, a broker on 127.0.0.1) stays as it was."""
    settings = load_settings(listen="127.0.0.1:7070", kafka_listen="127.0.0.1:9092", metrics_listen="127.0.0.1:9570")
    assert settings.exposed_without_auth == []
    assert load_settings(listen="localhost:7070", raft_listen="[::1]:7071", peers="1@[::1]:7071"
                         ).exposed_without_auth == []


def test_auth_makes_the_client_and_kafka_ports_acceptable_and_a_token_the_metrics_port(tmp_path):
    token = tmp_path / "metrics.token"
    token.write_text("scrape-secret\n")
    settings = load_settings(**WIDE, listen="0.0.0.0:7070", kafka_listen="0.0.0.0:9092", auth_enabled=True,
                             metrics_listen="0.0.0.0:9570", metrics_token_file=str(token))
    assert settings.exposed_without_auth == []
    with pytest.raises(errors.InvalidArgument, match="metrics_listen=0.0.0.0:9570"):
        load_settings(**WIDE, listen="0.0.0.0:7070", auth_enabled=True, metrics_listen="0.0.0.0:9570")


def test_allow_insecure_network_lets_the_broker_start_with_a_warning_naming_the_ports(caplog):
    settings = load_settings(**WIDE, listen="0.0.0.0:7070", metrics_listen="0.0.0.0:9570",
                             allow_insecure_network=True)
    assert settings.exposed_without_auth == ["listen=0.0.0.0:7070", "metrics_listen=0.0.0.0:9570"]
    assert load_settings().security.allow_insecure_network is False
    with caplog.at_level(logging.WARNING, logger="raftbus.broker.server"):
        warn_exposure(settings)  # what Broker.start calls first, at every start
        warn_exposure(load_settings())
    (warning,) = caplog.records
    assert warning.levelno == logging.WARNING and "listen=0.0.0.0:7070, metrics_listen=0.0.0.0:9570" in \
        warning.getMessage() and "allow_insecure_network" in warning.getMessage()
