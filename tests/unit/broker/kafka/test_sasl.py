"""Goal: the Kafka port's SASL handlers name a principal only for the right credentials: PLAIN with a token of
that principal, SCRAM with the token as password; PLAIN is not offered on a plaintext connection from outside
loopback; a failed authentication is answered SASL_AUTHENTICATION_FAILED and marks the connection for closing;
SaslAuthenticate before SaslHandshake is ILLEGAL_SASL_STATE; and the session's authorization hook answers Kafka's
error per resource, Describe being implied by any operation on the resource."""
import asyncio
import ssl
from types import MappingProxyType, SimpleNamespace

import pytest

from raftbus.broker.kafka import codes
from raftbus.broker.kafka.apis import sasl
from raftbus.broker.kafka.session import CLUSTER, CONSUME, DESCRIBE, GROUP, PRODUCE, TOPIC, Session
from raftbus.broker.security import scram
from raftbus.broker.security.acl import Acl
from raftbus.broker.security.policy import AccessPolicy
from raftbus.broker.security.state import SecurityTables, TokenRecord
from raftbus.broker.security.tokens import token_hash
from tests.unit.broker.security.test_scram import _client_final

SALT = b"principal-salt"


def _policy() -> AccessPolicy:
    tokens = {token_hash(t): TokenRecord(p, n, MappingProxyType({m: scram.verifier(m, t, SALT, 4096)
                                                                  for m in scram.MECHANISMS}))
              for t, p, n in (("tok-app", "app", 1), ("tok-other", "other", 2))}
    acls = {Acl("app", "topic", "a", "produce"): 1, Acl("app", "group", "c", "consume"): 1}
    return AccessPolicy(SecurityTables(MappingProxyType(tokens), MappingProxyType(acls)))


SERVICES = SimpleNamespace(token_policy=_policy)


def _call(handler, session, **body):
    return asyncio.run(handler(SimpleNamespace(body=SimpleNamespace(**body), session=session)))


def _session(peer="127.0.0.1:5000", tls=False) -> Session:
    async def make():
        return Session(peer, _policy, tls=tls)
    return asyncio.run(make())


def _handshake(session, mechanism: str) -> dict:
    return _call(sasl.handshake_handler(SERVICES), session, mechanism=mechanism)


def _authenticate(session, auth: bytes) -> dict:
    return _call(sasl.authenticate_handler(SERVICES), session, auth_bytes=auth)


def test_plain_with_the_principals_token_authenticates():
    session = _session()
    assert _handshake(session, "PLAIN")["error_code"] == codes.NONE
    assert not session.authenticated
    assert _authenticate(session, b"\x00app\x00tok-app")["error_code"] == codes.NONE
    assert session.principal == "app" and session.authenticated and not session.closing


@pytest.mark.parametrize("auth", [b"\x00app\x00tok-other", b"\x00app\x00wrong", b"\x00\x00tok-app",
                                  b"other\x00app\x00tok-app", b"app\x00tok-app", b"\x00app\x00\xff"])
def test_plain_with_a_wrong_token_user_or_shape_fails_and_closes(auth):
    """Goal: another principal's token, an unknown token, no user, acting for another user, a missing field and
    bytes that are not UTF-8 all fail the same way and leave no principal."""
    session = _session()
    _handshake(session, "PLAIN")
    answer = _authenticate(session, auth)
    assert answer["error_code"] == codes.SASL_AUTHENTICATION_FAILED and answer["error_message"]
    assert session.principal is None and session.closing


def test_plain_is_offered_only_over_tls_or_loopback():
    remote = _session(peer="10.1.2.3:4000")
    answer = _handshake(remote, "PLAIN")
    assert answer["error_code"] == codes.UNSUPPORTED_SASL_MECHANISM
    assert answer["mechanisms"] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert _handshake(_session(peer="10.1.2.3:4000", tls=True), "PLAIN")["error_code"] == codes.NONE
    assert _handshake(_session(peer="[::1]:4000"), "PLAIN")["error_code"] == codes.NONE
    assert _handshake(remote, "GSSAPI")["error_code"] == codes.UNSUPPORTED_SASL_MECHANISM


@pytest.mark.parametrize("mechanism", scram.MECHANISMS)
def test_scram_with_the_token_authenticates_and_a_wrong_one_fails(mechanism):
    for password, expected in (("tok-app", codes.NONE), ("tok-other", codes.SASL_AUTHENTICATION_FAILED)):
        session = _session(peer="10.1.2.3:4000")
        assert _handshake(session, mechanism)["error_code"] == codes.NONE
        first = _authenticate(session, b"n,,n=app,r=nonce")
        assert first["error_code"] == codes.NONE
        final, signature = _client_final(mechanism, password, "n=app,r=nonce", first["auth_bytes"].decode())
        answer = _authenticate(session, final.encode())
        assert answer["error_code"] == expected
        assert (session.principal == "app") == (expected == codes.NONE)
        assert session.closing == (expected != codes.NONE)


def test_authenticate_before_a_handshake_is_an_illegal_state():
    session = _session()
    assert _authenticate(session, b"\x00app\x00tok-app")["error_code"] == codes.ILLEGAL_SASL_STATE
    assert session.principal is None and session.closing


def test_the_hook_answers_each_resources_error_and_describe_follows_any_operation():
    session = _session()
    _handshake(session, "PLAIN")
    _authenticate(session, b"\x00app\x00tok-app")
    assert session.denied(TOPIC, "a", PRODUCE) == codes.NONE
    assert session.denied(TOPIC, "a", DESCRIBE) == codes.NONE  # a producer may read its topic's metadata
    assert session.denied(TOPIC, "a", CONSUME) == codes.TOPIC_AUTHORIZATION_FAILED
    assert session.denied(TOPIC, "b", DESCRIBE) == codes.TOPIC_AUTHORIZATION_FAILED
    assert session.denied(GROUP, "c", CONSUME) == codes.NONE
    assert session.denied(GROUP, "d", CONSUME) == codes.GROUP_AUTHORIZATION_FAILED
    assert session.denied(CLUSTER, "", DESCRIBE) == codes.CLUSTER_AUTHORIZATION_FAILED
    anonymous = _session()
    assert anonymous.denied(TOPIC, "a", PRODUCE) == codes.TOPIC_AUTHORIZATION_FAILED


def test_without_authorization_everything_is_allowed_and_no_sasl_is_needed():
    async def make():
        return Session("127.0.0.1:1", None)
    session = asyncio.run(make())
    assert session.authenticated and session.denied(CLUSTER, "", "admin") == codes.NONE


def test_a_client_certificate_names_a_principal_only_through_the_rules(tmp_path):
    """Goal: over mutual TLS the Kafka port names a certificate's principal exactly as the client port does:
    through `tls_principal_rules` over its subject (RFC 4514), none without rules or a matching rule, and a rule
    giving a reserved principal refuses the connection."""
    from types import SimpleNamespace as Ssl

    from raftbus.broker.kafka.listener import KafkaLimits, KafkaListener
    from raftbus.broker.security.principals import principal_rules
    from raftbus.broker.tls_dev import write_dev_pki
    from raftbus.client import errors

    pki = write_dev_pki(tmp_path, [], clients=("alice", "raftbus:broker"))

    def connection(name):
        pem = pki.client(name)[0].read_text()
        return Ssl(getpeercert=lambda binary_form: ssl.PEM_cert_to_DER_cert(pem))

    def listener(rules: str) -> KafkaListener:
        return KafkaListener("127.0.0.1:0", KafkaLimits(), certificate_rules=principal_rules(rules))

    assert listener("RULE:^CN=([^,]+)$/$1/").certificate_principal(connection("alice")) == "alice"
    assert listener("").certificate_principal(connection("alice")) is None
    assert listener("RULE:^CN=(zed)$/$1/").certificate_principal(connection("alice")) is None
    assert listener("DEFAULT").certificate_principal(connection("alice")) == "CN=alice"
    assert listener("RULE:^CN=([^,]+)$/$1/").certificate_principal(None) is None
    with pytest.raises(errors.Unauthenticated, match="reserved"):
        listener("RULE:^CN=([^,]+)$/$1/").certificate_principal(connection("raftbus:broker"))
