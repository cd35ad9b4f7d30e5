"""Goal: tokens are random and stored only as their SHA-256; the bearer header is parsed strictly; the internal
broker token is the cluster's internal-client key (HKDF, a label of its own) and differs between secrets."""
import hashlib
import hmac

import pytest

from raftbus.broker.raft.cluster_secret import ClusterKeys
from raftbus.broker.security.tokens import (
    INTERNAL_PRINCIPAL, bearer_token, internal_token, is_reserved, new_token, token_hash, token_id)
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


def keys(secret: str, cluster_id: str = "tokens-test") -> ClusterKeys:
    return ClusterKeys.of(secret, cluster_id)


def test_internal_token_is_a_key_of_its_own_purpose():
    """The internal token comes from the cluster's internal-client key: it depends on the secret and the cluster id,
    is none of the other purposes' keys, and is no plain function of the secret (the HMAC of the secret that an
    earlier release used, which anyone knowing a default secret could compute)."""
    one, two = keys("s" * 40), keys("t" * 40)
    assert internal_token(one.internal_client) == internal_token(keys("s" * 40).internal_client)
    assert internal_token(one.internal_client) != internal_token(two.internal_client)
    assert internal_token(one.internal_client) != internal_token(keys("s" * 40, "other").internal_client)
    assert len({one.internal_client, one.raft_handshake, one.queue_history}) == 3
    legacy = hmac.new(("s" * 40).encode(), b"raftbus-internal-client-v1", hashlib.sha256).hexdigest()
    assert legacy not in internal_token(one.internal_client) and "s" * 40 not in internal_token(one.internal_client)
    with pytest.raises(ValueError):
        internal_token(b"short")


def test_only_the_internal_token_names_a_reserved_principal():
    """A stored token of a reserved principal (raftbus:...) names nobody: no table row can make a broker."""
    token = new_token()
    tables = SecurityTables(MappingProxyType({token_hash(token): TokenRecord("raftbus:broker", 1)}),
                            MappingProxyType({}))
    assert AccessPolicy(tables).principal_of_token(token) is None
    assert is_reserved("raftbus:broker") and is_reserved("RAFTBUS:anything") and not is_reserved("raftbus-app")


def test_the_policy_knows_holders_of_live_tokens_and_the_internal_principal():
    token = new_token()
    tables = SecurityTables(MappingProxyType({token_hash(token): TokenRecord("alice", 1)}),
                            MappingProxyType({Acl("alice", "topic", "t", "produce"): 1}))
    secret, rotated, other = (internal_token(keys(s * 40).internal_client) for s in "snx")
    policy = AccessPolicy(tables, internal_tokens=(secret, rotated))
    assert policy.principal_of_token(token) == "alice"
    assert policy.principal_of_token(token + "x") is None
    assert policy.principal_of_token(secret) == INTERNAL_PRINCIPAL
    assert policy.principal_of_token(rotated) == INTERNAL_PRINCIPAL
    assert policy.principal_of_token(other) is None
    assert policy.allows("alice", "topic", "t", "produce") and not policy.allows("alice", "topic", "u", "produce")
    assert policy.allows(INTERNAL_PRINCIPAL, "cluster", "", "admin")
    assert not policy.allows("mallory", "topic", "t", "produce")
