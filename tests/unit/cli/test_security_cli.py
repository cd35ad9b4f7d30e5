"""Goal: `raftbus tokens` and `raftbus acl` parse their arguments into the right Admin calls and print what scripts
rely on; --tls-ca/--token-file (before or after the subcommand) become the variables the SDK reads."""
import json
import os

import pytest

from raftbus.cli import app as cli
from raftbus.cli import security as security_cli


class FakeAdmin:
    calls: list = []

    def __init__(self, bootstrap):
        self.calls.append(("bootstrap", bootstrap))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def create_token(self, principal):
        self.calls.append(("create_token", principal))
        return {"principal": principal, "token": "rbt_secret", "token_id": "0123456789abcdef"}

    def revoke_tokens(self, principal, token_id=""):
        self.calls.append(("revoke_tokens", principal, token_id))
        return 2

    def list_tokens(self, principal=""):
        return [{"principal": "app", "token_id": "0123456789abcdef", "created_ms": 5}]

    def grant_acl(self, principal, operation, **resource):
        self.calls.append(("grant_acl", principal, operation, resource))

    def revoke_acl(self, principal, operation, **resource):
        self.calls.append(("revoke_acl", principal, operation, resource))
        return 1

    def list_acls(self, principal=""):
        return [{"principal": "app", "resource_type": "prefix", "resource_name": "ord", "operation": "consume"}]


@pytest.fixture
def admin(monkeypatch):
    FakeAdmin.calls = []
    monkeypatch.setattr(security_cli, "Admin", FakeAdmin)
    for name in security_cli.CREDENTIAL_FLAGS.values():  # set first: monkeypatch then removes what the CLI sets
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return FakeAdmin


def test_tokens_create_prints_the_principal_and_token_as_json(admin, capsys):
    assert cli.main(["--bootstrap", "h:1", "tokens", "create", "app", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"principal": "app", "token": "rbt_secret",
                                                   "token_id": "0123456789abcdef"}
    assert cli.main(["tokens", "create", "app"]) == 0
    assert capsys.readouterr().out == "rbt_secret\n"
    assert ("bootstrap", "h:1") in admin.calls


def test_tokens_revoke_and_list(admin, capsys):
    assert cli.main(["tokens", "revoke", "app", "--token-id", "0123456789abcdef"]) == 0
    assert admin.calls[-1] == ("revoke_tokens", "app", "0123456789abcdef")
    assert "revoked 2 token(s) of app" in capsys.readouterr().out
    assert cli.main(["tokens", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["token_id"] == "0123456789abcdef"


@pytest.mark.parametrize("argv, resource", [
    (["--topic", "orders"], {"topic": "orders", "prefix": None, "group": None, "cluster": False}),
    (["--prefix", "ord"], {"topic": None, "prefix": "ord", "group": None, "cluster": False}),
    (["--group", "billing"], {"topic": None, "prefix": None, "group": "billing", "cluster": False}),
    (["--cluster"], {"topic": None, "prefix": None, "group": None, "cluster": True}),
])
def test_acl_grant_and_revoke_name_one_resource(admin, argv, resource):
    assert cli.main(["acl", "grant", "app", *argv, "--operation", "consume"]) == 0
    assert admin.calls[-1] == ("grant_acl", "app", "consume", resource)
    assert cli.main(["acl", "revoke", "app", *argv, "--operation", "consume"]) == 0
    assert admin.calls[-1] == ("revoke_acl", "app", "consume", resource)


def test_acl_needs_exactly_one_resource_and_a_known_operation(admin, capsys):
    assert cli.main(["acl", "grant", "app", "--operation", "produce"]) == 2
    assert cli.main(["acl", "grant", "app", "--topic", "t", "--group", "g", "--operation", "produce"]) == 2
    assert cli.main(["acl", "grant", "app", "--topic", "t", "--operation", "write"]) == 2
    assert not [c for c in admin.calls if c[0] == "grant_acl"]


@pytest.fixture
def credential_files(tmp_path, monkeypatch):
    from raftbus.broker.tls_dev import write_dev_pki

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ca.pem").write_bytes(write_dev_pki(tmp_path / "pki", [1]).ca_file.read_bytes())
    (tmp_path / "app.token").write_text("rbt_app\n")


@pytest.mark.parametrize("argv", [
    ["--tls-ca", "ca.pem", "--token-file", "app.token", "acl", "list"],
    ["acl", "list", "--tls-ca", "ca.pem", "--token-file", "app.token"],
])
def test_credential_flags_before_or_after_the_subcommand_reach_the_sdk(admin, credential_files, argv, capsys):
    assert cli.main(argv) == 0
    assert os.environ["RAFTBUS_TLS_CA"] == "ca.pem" and os.environ["RAFTBUS_TOKEN_FILE"] == "app.token"
    assert "prefix" in capsys.readouterr().out


def test_secret_generate_prints_a_fresh_secret_the_brokers_accept(capsys):
    from raftbus.broker.raft.cluster_secret import secret_problem

    assert cli.main(["secret", "generate"]) == 0
    first = capsys.readouterr().out.strip()
    assert cli.main(["secret", "generate", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)["cluster_secret"]
    assert len(first) == len(second) == 64 and first != second
    assert bytes.fromhex(first) and secret_problem(first, "orders-production", 32) is None
