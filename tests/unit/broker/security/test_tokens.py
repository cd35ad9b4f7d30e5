"""Goal: tokens are random and stored only as their SHA-256; the bearer header is parsed strictly; the internal
broker token is derived from the cluster secret and differs between secrets."""
import hashlib

from raftbus.broker.security.tokens import (
    INTERNAL_PRINCIPAL, bearer_token, internal_token, new_token, token_hash, token_id)
from raftbus.broker.security.policy import AccessPolicy
from raftbus.broker.security.state import SecurityTables, TokenRecord
from raftbus.broker.security.acl import Acl
from types import MappingProxyType


def test_new_tokens_are_random_and_hash_to_sha256():
    first, second = new_token(), new_token()
    assert first != second and first.startswith("rbt_") and len(first) > 40
    assert token_hash(first) == hashlib.sha256(first.encode()).hexdigest()
    assert token_id(token_hash(first)) == token_hash(first)[:16]


def test_bearer_token_is_read_from_the_authorization_metadata_only():
    assert bearer_token([("authorization", "Bearer abc")]) == "abc"
    assert bearer_token([("x", "y"), ("authorization", "bearer  abc ")]) == "abc"
    assert bearer_token([("authorization", "Basic abc")]) is None
    assert bearer_token([("authorization", "Bearer ")]) is None
    assert bearer_token([]) is None and bearer_token(None) is None


def test_internal_token_depends_on_the_cluster_secret():
    assert internal_token("s1") == internal_token("s1") != internal_token("s2")
    assert "s1" not in internal_token("s1")


def test_the_policy_knows_holders_of_live_tokens_and_the_internal_principal():
    token = new_token()
    tables = SecurityTables(MappingProxyType({token_hash(token): TokenRecord("alice", 1)}),
                            MappingProxyType({Acl("alice", "topic", "t", "produce"): 1}))
    policy = AccessPolicy(tables, internal_tokens=(internal_token("secret"), internal_token("next")))
    assert policy.principal_of_token(token) == "alice"
    assert policy.principal_of_token(token + "x") is None
    assert policy.principal_of_token(internal_token("secret")) == INTERNAL_PRINCIPAL
    assert policy.principal_of_token(internal_token("next")) == INTERNAL_PRINCIPAL
    assert policy.principal_of_token(internal_token("other")) is None
    assert policy.allows("alice", "topic", "t", "produce") and not policy.allows("alice", "topic", "u", "produce")
    assert policy.allows(INTERNAL_PRINCIPAL, "cluster", "", "admin")
    assert not policy.allows("mallory", "topic", "t", "produce")
