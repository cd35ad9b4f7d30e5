"""Component tests: the auth interceptor in front of the real servicers over in-process replication, called through
real channels on port 0 (plaintext with bearer tokens, and TLS with client certificates)."""
from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from raftbus.broker.grpc_server import build_server
from raftbus.broker.security.acl import Acl
from raftbus.broker.tls_dev import write_dev_pki
from raftbus.client import errors
from raftbus.client.credentials import Credentials
from raftbus.client.wire import raftbus_pb2 as pb
from raftbus.client.wire import raftbus_pb2_grpc as pb_grpc
from raftbus.client.wire import security_pb2 as spb
from raftbus.client.wire import security_pb2_grpc as spb_grpc
from tests.component.harness import ServiceBroker
from tests.component.test_grpc_servicers import produce_request


class Served:
    """One broker's Log, Admin and Security services behind the interceptor."""

    def __init__(self, **settings):
        self.broker = ServiceBroker(auth_enabled=True, cluster_secret="component-secret", **settings)
        self.broker.create_topic("orders", partitions=1)
        self.security = self.broker.security
        self.service = self.security.service
        self.server, health, self.port = build_server(
            "127.0.0.1:0", self.broker.servicers(), workers_max=8, message_bytes_max=8 << 20,
            credentials=self.security.server_credentials(), interceptors=self.broker.registry.interceptors)
        from grpc_health.v1 import health_pb2 as h
        health.set("", h.HealthCheckResponse.SERVING)
        self.server.start()
        self.channels = []

    def channel(self, **credentials) -> grpc.Channel:
        channel = Credentials.of(environ={}, **credentials).channel(f"127.0.0.1:{self.port}", [])
        self.channels.append(channel)
        return channel

    def log(self, **credentials):
        return pb_grpc.LogStub(self.channel(**credentials))

    def admin(self, **credentials):
        return pb_grpc.AdminStub(self.channel(**credentials))

    def close(self):
        for channel in self.channels:
            channel.close()
        self.server.stop(0).wait()


@pytest.fixture
def served():
    served = Served()
    yield served
    served.close()


def typed_failure(call) -> errors.RaftbusError:
    with pytest.raises(grpc.RpcError) as failure:
        call()
    return errors.error_from_rpc(failure.value)


def test_calls_without_a_token_or_with_an_unknown_one_are_unauthenticated(served):
    error = typed_failure(lambda: served.admin().GetMetadata(pb.MetadataRequest(), timeout=5))
    assert isinstance(error, errors.Unauthenticated) and "Admin/GetMetadata" in error.message
    error = typed_failure(lambda: served.admin(token="rbt_guess").GetMetadata(pb.MetadataRequest(), timeout=5))
    assert isinstance(error, errors.Unauthenticated) and "unknown or revoked" in error.message


def test_health_needs_no_credentials(served):
    stub = health_pb2_grpc.HealthStub(served.channel())
    assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING


def test_a_principal_needs_an_acl_per_operation_and_resource(served):
    token, _ = served.service.create_token("alice")
    assert served.admin(token=token).GetMetadata(pb.MetadataRequest(), timeout=5).topics[0].name == "orders"
    log = served.log(token=token)
    error = typed_failure(lambda: log.Produce(produce_request(1, [b"a"]), timeout=5))
    assert isinstance(error, errors.PermissionDenied)
    assert error.message == "principal 'alice' may not produce on topic 'orders' (Log/Produce)"
    served.service.grant_acl(Acl("alice", "topic", "orders", "produce"))
    assert log.Produce(produce_request(1, [b"a"]), timeout=5).base_offset == 0
    error = typed_failure(lambda: log.Fetch(pb.FetchRequest(topic="orders", partition=0, offset=0), timeout=5))
    assert isinstance(error, errors.PermissionDenied) and "consume on topic 'orders'" in error.message
    error = typed_failure(lambda: served.admin(token=token).DeleteTopic(pb.DeleteTopicRequest(name="orders"),
                                                                         timeout=5))
    assert isinstance(error, errors.PermissionDenied) and "admin on topic 'orders'" in error.message
    assert "orders" in served.broker.metadata_sm.topics()


def test_a_request_stream_is_checked_request_by_request(served):
    token, _ = served.service.create_token("alice")
    served.service.grant_acl(Acl("alice", "topic", "orders", "produce"))
    requests = [produce_request(1, [b"a"]), produce_request(2, [b"b"], topic="secret", sequence=1)]
    answers = []

    def run():
        for answer in served.log(token=token).ProduceStream(iter(requests), timeout=5):
            answers.append(answer)

    error = typed_failure(run)
    assert isinstance(error, errors.PermissionDenied) and "topic 'secret'" in error.message
    assert [a.request_id for a in answers if not a.HasField("error")] in ([], [1])


def test_revoking_a_token_or_an_acl_takes_effect_on_the_next_call(served):
    token, token_id = served.service.create_token("alice")
    served.service.grant_acl(Acl("alice", "prefix", "ord", "produce"))
    log = served.log(token=token)
    assert log.Produce(produce_request(1, [b"a"]), timeout=5).base_offset == 0
    served.service.revoke_acl(Acl("alice", "prefix", "ord", "produce"))
    assert isinstance(typed_failure(lambda: log.Produce(produce_request(2, [b"b"], sequence=1), timeout=5)),
                      errors.PermissionDenied)
    assert served.service.revoke_tokens("alice", token_id) == 1
    error = typed_failure(lambda: log.Produce(produce_request(2, [b"b"], sequence=1), timeout=5))
    assert isinstance(error, errors.Unauthenticated)


def test_security_calls_need_admin_on_the_cluster_and_the_bootstrap_admin_has_it(served):
    assert served.service.bootstrap_admin("admin", "rbt_first") is True
    assert served.service.bootstrap_admin("admin", "rbt_second") is False
    alice, _ = served.service.create_token("alice")
    denied = typed_failure(lambda: spb_grpc.SecurityStub(served.channel(token=alice)).CreateToken(
        spb.CreateTokenRequest(principal="eve"), timeout=5))
    assert isinstance(denied, errors.PermissionDenied) and "admin on the cluster" in denied.message
    admin = spb_grpc.SecurityStub(served.channel(token="rbt_first"))
    created = admin.CreateToken(spb.CreateTokenRequest(principal="eve"), timeout=5)
    assert created.principal == "eve" and created.token.startswith("rbt_")
    listed = admin.ListTokens(spb.ListTokensRequest(), timeout=5).tokens
    assert {(t.principal, t.token_id) for t in listed} >= {("eve", created.token_id)}
    assert all(created.token not in str(t) for t in listed)
    assert admin.WhoAmI(spb.WhoAmIRequest(), timeout=5).principal == "admin"
    assert served.log(token="rbt_first").Produce(produce_request(1, [b"a"]), timeout=5).base_offset == 0


def test_the_internal_broker_token_may_do_everything(served):
    internal = served.security.peer_credentials()["token"]
    assert served.log(token=internal).Produce(produce_request(1, [b"a"]), timeout=5).base_offset == 0


@pytest.fixture
def pki(tmp_path):
    names = ("alice", "raftbus:broker", "Bob")
    dev = write_dev_pki(tmp_path, [1], clients=names)
    cert, key = dev.broker(1)
    clients = {name: dict(zip(("cert", "key"), map(str, dev.client(name)))) for name in names}
    return {"ca": str(dev.ca_file), "brokers": {1: {"cert": str(cert), "key": str(key)}}, **clients}


CN_RULE = "RULE:^CN=([^,]+)$/$1/"


def test_mutual_tls_names_the_principal_by_its_certificate(pki):
    """A rule mapping the subject's CN names the principal; the caller is then checked by its ACLs."""
    broker = pki["brokers"][1]
    served = Served(tls_cert_file=broker["cert"], tls_key_file=broker["key"], tls_client_ca_file=pki["ca"],
                    tls_ca_file=pki["ca"], tls_principal_rules=CN_RULE)
    try:
        served.service.grant_acl(Acl("alice", "topic", "orders", "produce"))
        alice = served.log(tls_ca=pki["ca"], tls_cert=pki["alice"]["cert"], tls_key=pki["alice"]["key"])
        assert alice.Produce(produce_request(1, [b"a"]), timeout=5).base_offset == 0
        whoami = spb_grpc.SecurityStub(served.channels[-1]).WhoAmI(spb.WhoAmIRequest(), timeout=5)
        assert whoami.principal == "alice"
        no_cert = served.admin(tls_ca=pki["ca"])
        assert isinstance(typed_failure(lambda: no_cert.GetMetadata(pb.MetadataRequest(), timeout=5)),
                          errors.Unavailable)
        plaintext = served.admin()
        assert isinstance(typed_failure(lambda: plaintext.GetMetadata(pb.MetadataRequest(), timeout=5)),
                          errors.Unavailable)
    finally:
        served.close()


def certificate_call(served, pki, name):
    """GetMetadata with the client certificate of `name` and no token: the principal or the typed refusal."""
    channel = served.channel(tls_ca=pki["ca"], tls_cert=pki[name]["cert"], tls_key=pki[name]["key"])
    try:
        return spb_grpc.SecurityStub(channel).WhoAmI(spb.WhoAmIRequest(), timeout=5).principal
    except grpc.RpcError as failure:
        return errors.error_from_rpc(failure)


def test_a_certificate_naming_the_internal_principal_is_refused(pki):
    """A client certificate whose common name is the brokers' internal principal (raftbus:broker) is refused by any
    rule that would give that name (the CN rule, a lowercasing one); under DEFAULT it names the principal
    'CN=raftbus:broker', an ordinary one. Either way, with no ACL it can neither create a topic nor mint a token."""
    broker = pki["brokers"][1]
    for rules, named in ((CN_RULE, None), ("RULE:^CN=(.*)$/$1/L", None), ("DEFAULT", "CN=raftbus:broker")):
        served = Served(tls_cert_file=broker["cert"], tls_key_file=broker["key"], tls_client_ca_file=pki["ca"],
                        tls_ca_file=pki["ca"], tls_principal_rules=rules)
        try:
            answer = certificate_call(served, pki, "raftbus:broker")
            if named is None:
                assert isinstance(answer, errors.Unauthenticated) and "reserved" in answer.message, (rules, answer)
            else:
                assert answer == named
            channel = served.channel(tls_ca=pki["ca"], tls_cert=pki["raftbus:broker"]["cert"],
                                     tls_key=pki["raftbus:broker"]["key"])
            create = typed_failure(lambda: pb_grpc.AdminStub(channel).CreateTopic(
                pb.CreateTopicRequest(name="claimed", partitions=1, replication_factor=1), timeout=5))
            mint = typed_failure(lambda: spb_grpc.SecurityStub(channel).CreateToken(
                spb.CreateTokenRequest(principal="mallory"), timeout=5))
            refusal = errors.Unauthenticated if named is None else errors.PermissionDenied
            assert isinstance(create, refusal) and isinstance(mint, refusal), (create, mint)
            assert "claimed" not in [t.topic.name for t in served.broker.admin.list_topics()]
        finally:
            served.close()


def test_certificates_name_no_principal_without_rules_and_rules_are_applied_in_order(pki):
    """No rules (the default): a verified certificate alone is refused, naming the setting. With rules, the first
    that matches decides (here lowercasing Bob), and a subject no rule matches is refused."""
    broker = pki["brokers"][1]
    tls_files = dict(tls_cert_file=broker["cert"], tls_key_file=broker["key"], tls_client_ca_file=pki["ca"],
                     tls_ca_file=pki["ca"])
    served = Served(**tls_files)
    try:
        refused = certificate_call(served, pki, "alice")
        assert isinstance(refused, errors.Unauthenticated) and "tls_principal_rules" in refused.message
    finally:
        served.close()
    served = Served(**tls_files, tls_principal_rules="RULE:^CN=(B.*)$/$1/L, RULE:^CN=(a.*)$/user-$1/")
    try:
        assert certificate_call(served, pki, "Bob") == "bob"
        assert certificate_call(served, pki, "alice") == "user-alice"
    finally:
        served.close()
    served = Served(**tls_files, tls_principal_rules="RULE:^CN=(zed)$/$1/")
    try:
        assert isinstance(certificate_call(served, pki, "alice"), errors.Unauthenticated)
    finally:
        served.close()


def test_server_tls_without_client_certificates_authenticates_by_token(pki):
    broker = pki["brokers"][1]
    served = Served(tls_cert_file=broker["cert"], tls_key_file=broker["key"], tls_ca_file=pki["ca"])
    try:
        token, _ = served.service.create_token("alice")
        served.service.grant_acl(Acl("alice", "topic", "orders", "produce"))
        assert served.log(tls_ca=pki["ca"], token=token).Produce(produce_request(1, [b"a"]), timeout=5) \
            .base_offset == 0
        anonymous = served.log(tls_ca=pki["ca"])
        assert isinstance(typed_failure(lambda: anonymous.Produce(produce_request(1, [b"a"]), timeout=5)),
                          errors.Unauthenticated)
    finally:
        served.close()


class CountingDeserializer(grpc.ServerInterceptor):
    """Counts the requests the server deserializes, whatever handler the interceptors after it return."""

    def __init__(self):
        self.count = 0

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        parse = handler.request_deserializer

        def counted(data):
            self.count += 1
            return parse(data)
        return handler._replace(request_deserializer=counted)


def test_an_unauthenticated_request_is_never_parsed():
    """A 3 MiB produce with an unknown token or with no credentials is refused UNAUTHENTICATED without its message
    being deserialized (nor read in full); the same call with a known token is parsed once and served."""
    served = Served()
    counter = CountingDeserializer()
    server, _, port = build_server("127.0.0.1:0", served.broker.servicers(), workers_max=8, message_bytes_max=8 << 20,
                                   interceptors=[counter, *served.broker.registry.interceptors])
    server.start()
    try:
        big = produce_request(1, [b"x" * (3 << 20)])
        for credentials in ({"token": "rbt_guess"}, {}):
            channel = Credentials.of(environ={}, **credentials).channel(f"127.0.0.1:{port}", [])
            served.channels.append(channel)
            error = typed_failure(lambda: pb_grpc.LogStub(channel).Produce(big, timeout=10))
            assert isinstance(error, errors.Unauthenticated)
        assert counter.count == 0
        token, _ = served.service.create_token("alice")
        served.service.grant_acl(Acl("alice", "topic", "orders", "produce"))
        channel = Credentials.of(environ={}, token=token).channel(f"127.0.0.1:{port}", [])
        served.channels.append(channel)
        assert pb_grpc.LogStub(channel).Produce(big, timeout=10).base_offset == 0
        assert counter.count == 1
    finally:
        server.stop(0).wait()
        served.close()
