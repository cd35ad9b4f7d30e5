"""System tests of client-port security on real broker processes: TLS, bearer tokens and ACLs checked on the
broker that serves each call, every denied path (no token, bad token, revoked token, no ACL for produce, consume,
admin or a consumer group), a least-privileged principal's produce/consume/group/queue paths, the CLI's token
and ACL commands, and `raftbus dev --secure`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from raftbus.client import Admin, Consumer, Producer, QueueConsumer, Queues, Reader, errors
from tests.helpers import wait_until
from tests.system.conftest import running_cluster

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("secure-cluster"), secure=True) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic("orders", partitions=2, replication_factor=3)
            admin.create_topic("jobs", partitions=1, replication_factor=3, kind="queue", max_deliveries=1,
                               backoff_base_ms=10, backoff_max_ms=20)
        yield cluster


def principal(cluster, name: str, *grants: dict) -> str:
    """A new token of `name` holding `grants` (each: operation= plus one resource)."""
    with Admin(cluster.bootstrap) as admin:
        token = admin.create_token(name)["token"]
        for grant in grants:
            admin.grant_acl(name, **grant)
    return token


def as_principal(cluster, token: str | None) -> dict:
    return {"tls_ca": cluster.secure.ca, "token": token}


def failure(call) -> errors.RaftbusError:
    with pytest.raises(errors.RaftbusError) as caught:
        call()
    return caught.value


def produce_one(cluster, token, topic="orders"):
    with Producer(cluster.bootstrap, linger_ms=0, delivery_timeout_ms=10_000, **as_principal(cluster, token)) as p:
        return p.send(topic, b"v", partition=0).result(15)


def test_missing_bad_and_plaintext_credentials_are_refused(secure):
    """No token and an unknown token are UNAUTHENTICATED; a plaintext client cannot even reach the TLS port, and is
    told so (TLS_MISMATCH)."""
    for token, expected in ((None, "needs credentials"), ("rbt_not-a-real-token", "unknown or revoked")):
        err = failure(lambda: Admin(secure.bootstrap, **as_principal(secure, token)).list_topics())
        assert isinstance(err, errors.Unauthenticated) and expected in err.message
    err = failure(lambda: Admin(secure.bootstrap, token=secure.secure.admin_token, request_timeout_ms=2000)
                  .list_topics())
    assert isinstance(err, errors.TlsMismatch) and "speaks TLS; pass --tls-ca" in err.message


def test_a_revoked_token_is_refused_by_every_broker_without_a_restart(secure):
    token = principal(secure, "temp")
    for broker in secure.brokers:
        wait_until(lambda b=broker: Admin(b.address, **as_principal(secure, token)).list_topics(), 10,
                   what=f"token known on broker {broker.node_id}")
    with Admin(secure.bootstrap) as admin:
        assert admin.revoke_tokens("temp") == 1

    def refused_everywhere():
        for broker in secure.brokers:
            try:
                Admin(broker.address, **as_principal(secure, token)).list_topics()
                return False
            except errors.Unauthenticated:
                continue
        return True

    wait_until(refused_everywhere, 10, what="revoked token refused by every broker")


def test_each_operation_needs_its_own_acl(secure):
    """A principal with produce on `orders` cannot consume it, administer it, join a group, or enqueue."""
    token = principal(secure, "writer", {"operation": "produce", "topic": "orders"})
    assert produce_one(secure, token).topic == "orders"
    err = failure(lambda: Reader(secure.bootstrap, **as_principal(secure, token)).fetch("orders", 0, 0))
    assert isinstance(err, errors.PermissionDenied) and "consume on topic 'orders'" in err.message
    err = failure(lambda: Admin(secure.bootstrap, **as_principal(secure, token)).create_topic("mine"))
    assert isinstance(err, errors.PermissionDenied) and "admin on topic 'mine'" in err.message
    err = failure(lambda: Admin(secure.bootstrap, **as_principal(secure, token)).delete_topic("orders"))
    assert isinstance(err, errors.PermissionDenied) and "Admin/DeleteTopic" in err.message
    err = failure(lambda: produce_one(secure, token, topic="jobs"))
    assert isinstance(err, errors.PermissionDenied) and "produce on topic 'jobs'" in err.message
    err = failure(lambda: Admin(secure.bootstrap, **as_principal(secure, token)).create_token("eve"))
    assert isinstance(err, errors.PermissionDenied) and "admin on the cluster" in err.message
    with Admin(secure.bootstrap) as admin:
        assert "orders" in {t.name for t in admin.list_topics()}


def test_a_consumer_group_needs_consume_on_the_group_as_well(secure):
    token = principal(secure, "reader", {"operation": "consume", "topic": "orders"})
    with Consumer(secure.bootstrap, group="billing", topics=["orders"], **as_principal(secure, token)) as consumer:
        err = failure(lambda: consumer.poll(10.0))
    assert isinstance(err, errors.PermissionDenied) and "consume on group 'billing'" in err.message


def test_a_least_privileged_principal_produces_consumes_in_a_group_and_works_a_queue(secure):
    """Produce, group consume with commits, enqueue, lease, nack into the dead-letter topic (moved by the
    brokers with their own credentials) and ack, with only the ACLs each step needs."""
    token = principal(secure, "app", {"operation": "produce", "prefix": "ord"}, {"operation": "consume",
                      "prefix": "ord"}, {"operation": "consume", "group": "app-group"},
                      {"operation": "produce", "topic": "jobs"}, {"operation": "consume", "prefix": "jobs"})
    creds = as_principal(secure, token)
    with Producer(secure.bootstrap, **creds) as producer:
        sent = [producer.send("orders", f"r{i}".encode(), partition=i % 2) for i in range(20)]
        producer.flush()
        assert all(f.result(15).topic == "orders" for f in sent)
        producer.send("jobs", b"job-1").result(15)
    seen = []
    with Consumer(secure.bootstrap, group="app-group", topics=["orders"], auto_offset_reset="earliest",
                  **creds) as consumer:
        def read():
            seen.extend(r.value for r in consumer.poll(1.0))
            return len(seen) >= 20
        wait_until(read, 60, interval_s=0, what="20 records read by the group")
        consumer.commit()
    assert set(seen) >= {f"r{i}".encode() for i in range(20)}
    with QueueConsumer(secure.bootstrap, topics=["jobs"], **creds) as workers:
        leased = wait_until(lambda: workers.poll(1.0), 30, interval_s=0, what="a leased job")
        leased[0].nack(delay_ms=0).result(15)
    with Queues(secure.bootstrap, **creds) as queues:
        wait_until(lambda: queues.peek("jobs.dlq", 0, max_messages=5), 30, what="the job in jobs.dlq")
        err = failure(lambda: queues.redrive("jobs"))
        assert isinstance(err, errors.PermissionDenied) and "admin on topic 'jobs'" in err.message
    with Queues(secure.bootstrap) as admin_queues:
        assert admin_queues.redrive("jobs") == 1


def test_a_client_certificate_is_not_required_but_a_token_is(secure, tmp_path):
    """Without tls_client_ca_file the port is server-TLS only: a client certificate alone names no principal."""
    cert = secure.secure.client_certificate("alice")
    err = failure(lambda: Admin(secure.bootstrap, tls_ca=secure.secure.ca, tls_cert=cert["cert"],
                                tls_key=cert["key"]).list_topics())
    assert isinstance(err, errors.Unauthenticated)


def cli(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", "from raftbus.cli import main; raise SystemExit(main())", *argv]
    clean = {k: v for k, v in os.environ.items() if k not in ("RAFTBUS_TLS_CA", "RAFTBUS_TOKEN_FILE")}
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env={**clean, **(env or {})})


def test_cli_creates_lists_and_revokes_tokens_and_acls(secure, tmp_path):
    flags = ["--bootstrap", secure.bootstrap, "--tls-ca", secure.secure.ca, "--token-file",
             secure.secure.admin_token_file]
    created = cli(*flags, "tokens", "create", "carol", "--json")
    assert created.returncode == 0, created.stderr
    token = json.loads(created.stdout)
    assert token["principal"] == "carol" and token["token"].startswith("rbt_")
    granted = cli(*flags, "acl", "grant", "carol", "--topic", "orders", "--operation", "consume")
    assert granted.returncode == 0, granted.stderr
    acls = json.loads(cli(*flags, "--json", "acl", "list", "--principal", "carol").stdout)
    assert acls == [{"principal": "carol", "resource_type": "topic", "resource_name": "orders",
                     "operation": "consume"}]
    token_file = tmp_path / "carol.token"
    token_file.write_text(token["token"])
    env = {"RAFTBUS_TLS_CA": secure.secure.ca, "RAFTBUS_TOKEN_FILE": str(token_file)}
    assert cli("--bootstrap", secure.bootstrap, "whoami", env=env).stdout.strip() == "carol"
    denied = cli("--bootstrap", secure.bootstrap, "produce", "orders", "--value", "x", env=env)
    assert denied.returncode == 1 and "PERMISSION_DENIED" in denied.stderr
    listed = json.loads(cli(*flags, "--json", "tokens", "list", "--principal", "carol").stdout)
    assert [t["principal"] for t in listed] == ["carol"] and token["token"] not in json.dumps(listed)
    assert cli(*flags, "acl", "revoke", "carol", "--topic", "orders", "--operation", "consume").returncode == 0
    assert cli(*flags, "tokens", "revoke", "carol").returncode == 0
    refused = cli("--bootstrap", secure.bootstrap, "whoami", env=env)
    assert refused.returncode == 1 and "UNAUTHENTICATED" in refused.stderr
    assert json.loads(cli(*flags, "--json", "acl", "list", "--principal", "carol").stdout) == []


def test_dev_secure_writes_the_ca_and_an_admin_token_and_serves_only_with_them(tmp_path):
    from tests.system.test_dev import dev_addresses

    data = tmp_path / "dev"
    proc = subprocess.Popen([sys.executable, "-m", "raftbus.broker", "dev", "--secure", "--brokers", "1",
                             "--data-dir", str(data), "--base-port", "0", "--kafka-base-port", "0",
                             "--log-level", "WARNING"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        lines = []
        wait_until(lambda: lines.append(proc.stdout.readline()) or "cluster ready" in lines[-1], 60,
                   interval_s=0, what="dev cluster ready")
        bootstrap = dev_addresses(lines)[0]
        assert (data / "ca.pem").is_file() and (data / "admin.token").is_file()
        assert oct((data / "admin.token").stat().st_mode & 0o777) == "0o600"
        env = {"RAFTBUS_TLS_CA": str(data / "ca.pem"), "RAFTBUS_TOKEN_FILE": str(data / "admin.token")}
        assert cli("--bootstrap", bootstrap, "whoami", env=env).stdout.strip() == "admin"
        anonymous = cli("--bootstrap", bootstrap, "--tls-ca", str(data / "ca.pem"), "topics", "list")
        assert anonymous.returncode == 1 and "UNAUTHENTICATED" in anonymous.stderr
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(30)


def test_the_asyncio_sdk_reaches_a_secure_cluster_through_the_environment(secure):
    """AsyncProducer's produce stream and AsyncReader's fetches carry TLS and the token from RAFTBUS_TLS_CA /
    RAFTBUS_TOKEN_FILE (here the admin's); without them the same calls are refused."""
    import asyncio

    from raftbus.client.aio import AsyncProducer, AsyncReader

    with Admin(secure.bootstrap) as admin:
        admin.create_topic("aio-secure", partitions=1, replication_factor=3)

    async def produce_and_read():
        async with AsyncProducer(secure.bootstrap, linger_ms=2) as producer:
            acked = [await producer.send("aio-secure", f"v{i}") for i in range(5)]
        async with AsyncReader(secure.bootstrap) as reader:
            values = [r.value async for r in reader.iter_partition("aio-secure", 0, 0, stop_at_end=True)]
        return acked, values

    acked, values = asyncio.run(produce_and_read())
    assert [m.offset for m in acked] == [0, 1, 2, 3, 4] and values == [f"v{i}".encode() for i in range(5)]

    async def anonymous():
        async with AsyncReader(secure.bootstrap, tls_ca=secure.secure.ca, token="rbt_unknown") as reader:
            return [r async for r in reader.iter_partition("aio-secure", 0, 0, stop_at_end=True)]

    err = failure(lambda: asyncio.run(anonymous()))
    assert isinstance(err, errors.Unauthenticated)
