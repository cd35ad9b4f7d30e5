"""System tests of the HTTP gateway in front of a secure cluster (TLS, tokens and ACLs on three real brokers): a
bearer token acts as its principal, a token the cluster refuses gets 401 and costs nothing lasting (no client set,
no thread, no other caller's consumer instance), anonymous callers get 401 unless --anonymous names a principal
of their own, and client sets are bounded per principal. Every gateway here starts from the admin's shell
(RAFTBUS_TOKEN_FILE holds the admin token), as one started after the quick start would."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from raftbus.client import Admin
from tests.helpers import wait_until
from tests.system.conftest import running_cluster
from tests.system.http_gateway import Api, running_gateway

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("http-secure"), secure=True) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic("orders", partitions=2, replication_factor=3)
        yield cluster


def principal(cluster, name: str, *grants: dict) -> str:
    """A new token of `name` holding `grants` (each: operation= plus one resource)."""
    with Admin(cluster.bootstrap) as admin:
        token = admin.create_token(name)["token"]
        for grant in grants:
            admin.grant_acl(name, **grant)
    return token


def token_file(tmp_path: Path, token: str) -> str:
    path = tmp_path / "anonymous.token"
    path.write_text(token + "\n")
    return str(path)


def threads_of(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


RECORDS = {"records": [{"value": "through the gateway", "partition": 0}]}


def test_a_bearer_token_acts_as_its_principal_and_an_unknown_one_gets_401(secure, tmp_path):
    """Goal: the brokers decide a token's request by its principal's ACLs; a token they refuse is 401."""
    admin = secure.secure.admin_token
    reader = principal(secure, "http-reader", {"operation": "consume", "topic": "orders"})
    with running_gateway(secure.bootstrap, tmp_path / "gateway.log") as gateway:
        as_admin = Api(gateway.url, {"Authorization": f"Bearer {admin}"})
        as_reader = Api(gateway.url, {"Authorization": f"Bearer {reader}"})
        as_admin.ok("POST", "/v1/topics/orders/records", RECORDS)
        (denied,) = as_reader.ok("POST", "/v1/topics/orders/records", RECORDS)["offsets"]  # per-record outcome
        assert denied["error"]["code"] == "PERMISSION_DENIED" and "http-reader" in denied["error"]["message"]
        read = as_reader.ok("GET", "/v1/topics/orders/partitions/0/records?offset=0&max=100")
        assert "through the gateway" in [r["value"] for r in read["records"]]
        status, answer, headers = Api(gateway.url, {"Authorization": "Bearer rbt_not-a-token"}).exchange(
            "GET", "/v1/topics/orders/partitions/0/records?offset=0")
        assert (status, answer["error"]["code"], headers["WWW-Authenticate"]) == (401, "UNAUTHENTICATED", "Bearer")
        assert headers.get("X-Raftbus-Token-Checked") is None


def test_anonymous_callers_get_401_though_the_gateway_runs_in_an_admin_shell(secure, tmp_path):
    """Goal: without --anonymous, a caller without a token does nothing, even with the admin token in the
    gateway's environment."""
    with running_gateway(secure.bootstrap, tmp_path / "gateway.log") as gateway:
        anonymous = Api(gateway.url)
        anonymous.error("GET", "/v1/topics", status=401, code="UNAUTHENTICATED")
        anonymous.error("POST", "/v1/topics", {"name": "anonymous-made"}, status=401, code="UNAUTHENTICATED")
        anonymous.error("DELETE", "/v1/topics/orders", status=401, code="UNAUTHENTICATED")
        anonymous.error("GET", "/v1/dashboard", status=401, code="UNAUTHENTICATED")
    with Admin(secure.bootstrap) as admin:
        assert {"orders"} <= {t.name for t in admin.list_topics()}
        assert "anonymous-made" not in {t.name for t in admin.list_topics()}


def test_anonymous_callers_act_as_the_principal_named_for_them(secure, tmp_path):
    """Goal: --anonymous P with a token of P: anonymous callers have P's rights and nothing more."""
    viewer = principal(secure, "http-viewer", {"operation": "consume", "topic": "orders"})
    flags = ("--anonymous", "http-viewer", "--anonymous-token-file", token_file(tmp_path, viewer))
    with running_gateway(secure.bootstrap, tmp_path / "gateway.log", *flags) as gateway:
        anonymous = Api(gateway.url)
        anonymous.ok("GET", "/v1/topics/orders/partitions/1/records?offset=0")
        (denied,) = anonymous.ok("POST", "/v1/topics/orders/records", RECORDS)["offsets"]
        assert denied["error"]["code"] == "PERMISSION_DENIED" and "http-viewer" in denied["error"]["message"]
        anonymous.error("DELETE", "/v1/topics/orders", status=403, code="PERMISSION_DENIED")


def gateway_refusal(secure, tmp_path, *flags: str) -> str:
    raftbus = Path(sys.executable).parent / "raftbus"
    done = subprocess.run([str(raftbus), "http", "--bootstrap", secure.bootstrap, "--listen", "127.0.0.1:0", *flags],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == "", (done.returncode, done.stdout, done.stderr)
    return done.stderr


def test_an_anonymous_principal_without_its_own_token_stops_the_gateway(secure, tmp_path):
    """Goal: the gateway does not start when anonymous callers would act with someone else's token (the admin's)
    or with none on a cluster that checks tokens."""
    stolen = gateway_refusal(secure, tmp_path, "--anonymous", "http-viewer", "--anonymous-token-file",
                             secure.secure.admin_token_file)
    assert "INVALID_ARGUMENT" in stolen and "holds a token of 'admin'" in stolen
    missing = gateway_refusal(secure, tmp_path, "--anonymous", "http-viewer")
    assert "needs --anonymous-token-file" in missing


def test_junk_tokens_build_nothing_and_take_no_ones_consumer_instance(secure, tmp_path):
    """Goal: 70 tokens the cluster refuses are 70 × 401: the gateway keeps no thread for them, and another
    caller's consumer instance keeps working; another principal cannot see that instance."""
    worker = principal(secure, "http-worker", {"operation": "consume", "topic": "orders"},
                       {"operation": "consume", "group": "http-billing"})
    other = principal(secure, "http-other", {"operation": "consume", "topic": "orders"},
                      {"operation": "consume", "group": "http-billing"})
    with running_gateway(secure.bootstrap, tmp_path / "gateway.log") as gateway:
        as_worker = Api(gateway.url, {"Authorization": f"Bearer {worker}"})
        base = as_worker.ok("POST", "/v1/consumers/http-billing/instances",
                            {"name": "w1", "auto_offset_reset": "earliest"})["base_uri"]
        as_worker.ok("POST", f"{base}/subscription", {"topics": ["orders"]})
        wait_until(lambda: as_worker.ok("GET", f"{base}/records?timeout_ms=200") is not None
                   and as_worker.ok("GET", f"{base}/assignments")["partitions"], 60, 0, what="the member joined")
        before = threads_of(gateway.proc.pid)
        for i in range(70):
            Api(gateway.url, {"Authorization": f"Bearer rbt_junk-{i}"}).error(
                "GET", "/v1/topics", status=401, code="UNAUTHENTICATED")
        assert threads_of(gateway.proc.pid) <= before + 2
        assert len(as_worker.ok("GET", f"{base}/assignments")["partitions"]) == 2
        as_worker.ok("GET", f"{base}/records?timeout_ms=100")
        Api(gateway.url, {"Authorization": f"Bearer {other}"}).error("GET", f"{base}/records", status=404,
                                                                       code="UNKNOWN_MEMBER")
        as_worker.ok("DELETE", base)


def test_client_sets_are_bounded_per_principal(secure, tmp_path):
    """Goal: six tokens of one principal hold no more client sets (threads) than --token-client-sets-per-principal-max
    of them, and every one of them is still served."""
    tokens = [principal(secure, "http-rotating", {"operation": "consume", "topic": "orders"}) for _ in range(6)]
    flags = ("--token-client-sets-per-principal-max", "2")
    with running_gateway(secure.bootstrap, tmp_path / "gateway.log", *flags) as gateway:
        path = "/v1/topics/orders/partitions/0/records?offset=0&max=1"
        for token in tokens[:2]:
            Api(gateway.url, {"Authorization": f"Bearer {token}"}).ok("GET", path)
        two_sets = threads_of(gateway.proc.pid)
        for token in tokens[2:] * 2:
            Api(gateway.url, {"Authorization": f"Bearer {token}"}).ok("GET", path)
        wait_until(lambda: threads_of(gateway.proc.pid) <= two_sets + 1, 20, 0.1,
                   what="the gateway back to two client sets' threads")
