"""The cluster secret policy: weak secrets stay on loopback, the Raft key is salted per cluster, and development
credentials are random, private and reused."""
from __future__ import annotations

import pytest

from raftbus.broker.raft import cluster_secret as policy
from raftbus.broker.settings import load_settings
from raftbus.client import errors

STRONG = "s" * 40


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("10.0.0.5", False), ("::", False), ("broker-1.internal", False)])
def test_loopback_hosts(host, loopback):
    """Loopback addresses and localhost count as loopback; wildcard, private and other names do not."""
    assert policy.is_loopback(host) is loopback


@pytest.mark.parametrize("secret, cluster_id, word", [
    ("", "prod", "empty"), (policy.DEFAULT_SECRET, "prod", "default"), ("x" * 31, "prod", "shorter"),
    (STRONG, policy.DEFAULT_CLUSTER_ID, "cluster_id"), (STRONG, "", "cluster_id")])
def test_weak_secrets_are_named(secret, cluster_id, word):
    """Each weakness is named in the problem."""
    problem = policy.secret_problem(secret, cluster_id, 32)
    assert problem and word in problem


def test_a_strong_secret_with_a_cluster_id_passes():
    """A long secret with a cluster id of its own has no problem."""
    assert policy.secret_problem(STRONG, "prod", 32) is None


def test_the_raft_key_depends_on_the_cluster_id():
    """The same secret gives another key in another cluster: no precomputed table serves every cluster."""
    assert policy.raft_key(STRONG, "a") != policy.raft_key(STRONG, "b")
    assert policy.raft_key(STRONG, "a") == policy.raft_key(STRONG, "a") and len(policy.raft_key(STRONG, "a")) == 32


@pytest.mark.parametrize("overrides", [
    dict(raft_listen="0.0.0.0:7071", peers="1@0.0.0.0:7071"),
    dict(listen="10.1.2.3:7070"),
    dict(raft_listen="0.0.0.0:7071", peers="1@0.0.0.0:7071", cluster_secret=""),
    dict(raft_listen="0.0.0.0:7071", peers="1@0.0.0.0:7071", cluster_secret="x" * 20, cluster_id="prod"),
])
def test_settings_refuse_a_weak_secret_beyond_loopback(overrides):
    """Any non-loopback listener with a weak secret fails validation naming cluster_secret."""
    with pytest.raises(errors.InvalidArgument, match="cluster_secret"):
        load_settings(**overrides)


def test_settings_accept_a_weak_secret_on_loopback_and_a_strong_one_anywhere():
    """The default secret serves loopback; a strong one any address; the minimum is a setting."""
    assert load_settings().node.cluster_secret == policy.DEFAULT_SECRET
    settings = load_settings(raft_listen="0.0.0.0:7071", peers="1@0.0.0.0:7071", cluster_secret=STRONG,
                             cluster_id="prod")
    assert settings.node.raft_secret == policy.raft_key(STRONG, "prod")
    short_allowed = load_settings(raft_listen="0.0.0.0:7071", peers="1@0.0.0.0:7071", cluster_secret="x" * 20,
                                  cluster_id="prod", cluster_secret_bytes_min=16)
    assert short_allowed.node.cluster_secret == "x" * 20


def test_handshake_bounds_must_be_consistent():
    """The per-address bound cannot exceed the total."""
    with pytest.raises(errors.InvalidArgument, match="raft_handshakes_pending"):
        load_settings(raft_handshakes_pending_max=4, raft_handshakes_pending_per_address_max=8)


def test_dev_credentials_are_random_private_and_reused(tmp_path):
    """Each data dir gets its own strong secret and id, owner-only, the same on every call."""
    first = policy.dev_credentials(tmp_path / "a")
    assert policy.dev_credentials(tmp_path / "a") == first
    other = policy.dev_credentials(tmp_path / "b")
    assert other["cluster_secret"] != first["cluster_secret"] and other["cluster_id"] != first["cluster_id"]
    assert len(first["cluster_secret"].encode()) >= 32
    assert policy.secret_problem(first["cluster_secret"], first["cluster_id"], 32) is None
    assert (tmp_path / "a" / policy.DEV_CREDENTIALS_FILE).stat().st_mode & 0o777 == 0o600


def test_an_accepted_secret_is_held_to_the_same_rules():
    """cluster_secret_accepted must be as strong as cluster_secret beyond loopback, and derives its own key."""
    beyond = dict(raft_listen="0.0.0.0:7071", peers="1@0.0.0.0:7071", cluster_secret=STRONG, cluster_id="prod")
    with pytest.raises(errors.InvalidArgument, match="cluster_secret_accepted"):
        load_settings(**beyond, cluster_secret_accepted="short")
    settings = load_settings(**beyond, cluster_secret_accepted="t" * 40)
    assert settings.node.raft_accepted_secrets == [policy.raft_key("t" * 40, "prod")]
    assert load_settings(**beyond).node.raft_accepted_secrets == []
