"""Goal: the token and ACL commands of the metadata state machine are deterministic, store only token hashes,
survive a reload from the store, refuse malformed commands without changing anything, and bootstrap the first
admin only once."""
import json

import pytest

from raftbus.broker import commands
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.security import commands as security_commands
from raftbus.broker.security.acl import Acl
from raftbus.broker.security.tokens import token_hash, token_id
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors

HASH_A, HASH_B = token_hash("token-a"), token_hash("token-b")


class Metadata:
    def __init__(self, store=None):
        self.store = store or MemoryStore(MetadataStateMachine.TABLES)
        self.sm = MetadataStateMachine(self.store)
        self.index = self.sm.applied_index()

    def apply(self, command):
        self.index += 1
        return self.sm.apply(self.index, command)


@pytest.fixture
def meta():
    return Metadata()


def test_create_token_stores_the_hash_and_names_it_by_id(meta):
    assert meta.apply(security_commands.encode_create_token(principal="alice", token_hash=HASH_A, now_ms=7)) == token_id(HASH_A)
    tables = meta.sm.security()
    assert tables.tokens[HASH_A].principal == "alice" and tables.tokens[HASH_A].created_ms == 7
    with meta.store.read() as txn:
        stored = [(bytes(k), bytes(v)) for k, v in txn.items("tokens")]
    assert stored == [(HASH_A.encode(), json.dumps({"created_ms": 7, "principal": "alice"}).encode())]
    assert b"token-a" not in b"".join(k + v for k, v in stored)


def test_revoke_removes_one_token_by_id_or_all_of_a_principal(meta):
    meta.apply(security_commands.encode_create_token(principal="alice", token_hash=HASH_A, now_ms=1))
    meta.apply(security_commands.encode_create_token(principal="alice", token_hash=HASH_B, now_ms=2))
    meta.apply(security_commands.encode_create_token(principal="bob", token_hash=token_hash("c"), now_ms=3))
    assert meta.apply(security_commands.encode_revoke_tokens(principal="alice", token_id=token_id(HASH_B), now_ms=4)) == 1
    assert set(meta.sm.security().tokens) == {HASH_A, token_hash("c")}
    assert meta.apply(security_commands.encode_revoke_tokens(principal="bob", token_id="", now_ms=5)) == 1
    assert meta.apply(security_commands.encode_revoke_tokens(principal="alice", token_id="", now_ms=6)) == 1
    assert meta.sm.security().tokens == {}


def test_acls_are_granted_once_listed_sorted_and_revoked(meta):
    acl = Acl("alice", "topic", "orders", "produce")
    assert meta.apply(security_commands.encode_grant_acl(acl, now_ms=1)) is True
    assert meta.apply(security_commands.encode_grant_acl(acl, now_ms=2)) is False
    meta.apply(security_commands.encode_grant_acl(Acl("alice", "group", "g", "consume"), now_ms=3))
    assert meta.sm.security().acls_of("alice") == [Acl("alice", "group", "g", "consume"), acl]
    assert meta.apply(security_commands.encode_revoke_acl(acl, now_ms=4)) == 1
    assert meta.apply(security_commands.encode_revoke_acl(acl, now_ms=5)) == 0
    assert meta.sm.security().acls_of() == [Acl("alice", "group", "g", "consume")]


def test_bootstrap_admin_applies_only_to_a_cluster_without_tokens_or_acls(meta):
    assert meta.apply(security_commands.encode_bootstrap_admin(principal="admin", token_hash=HASH_A, now_ms=1)) is True
    assert meta.sm.security().acls_of() == [Acl("admin", "cluster", "", "admin")]
    assert meta.apply(security_commands.encode_bootstrap_admin(principal="root", token_hash=HASH_B, now_ms=2)) is False
    assert set(meta.sm.security().tokens) == {HASH_A}


@pytest.mark.parametrize("command, word", [
    (security_commands.encode_create_token(principal="alice", token_hash="not-a-hash", now_ms=1), "token_hash"),
    (security_commands.encode_create_token(principal="", token_hash=HASH_A, now_ms=1), "principal"),
    (security_commands.encode_grant_acl(Acl("alice", "topic", "t", "write"), now_ms=1), "operation"),
    (security_commands.encode_grant_acl(Acl("alice", "everything", "t", "admin"), now_ms=1), "resource type"),
    (commands._encode_json(security_commands.GRANT_ACL, principal="alice", now_ms=1), "resource_type"),
])
def test_malformed_commands_are_refused_and_change_nothing(meta, command, word):
    result = meta.apply(command)
    assert isinstance(result, errors.InvalidArgument) and word in result.message
    assert meta.sm.security().tokens == {} and meta.sm.security().acls == {}
    assert meta.sm.applied_index() == meta.index


def test_replicas_applying_the_same_commands_agree_and_a_reload_restores_them(tmp_path):
    script = [security_commands.encode_create_token(principal="alice", token_hash=HASH_A, now_ms=1),
              security_commands.encode_grant_acl(Acl("alice", "prefix", "billing.", "consume"), now_ms=2),
              security_commands.encode_create_token(principal="alice", token_hash=HASH_B, now_ms=3),
              security_commands.encode_revoke_tokens(principal="alice", token_id=token_id(HASH_A), now_ms=4)]
    first, second = Metadata(), Metadata()
    for command in script:
        assert first.apply(command) == second.apply(command)
    assert first.sm.security() == second.sm.security()
    reloaded = MetadataStateMachine(first.store)
    assert reloaded.security() == first.sm.security()
    assert reloaded.applied_index() == len(script)
