"""Unit tests of the gateway's callers: client sets are built only for tokens the cluster accepted and are bounded
in all and per principal; anonymous callers are refused unless configured; a cluster that checks no tokens is
warned about once (no server, no cluster: the token check and the clients are stand-ins)."""
from __future__ import annotations

import logging

import pytest

from raftbus.client import errors
from raftbus.gateway.client_sets import ClientSets
from raftbus.gateway.gateway import Gateway
from raftbus.gateway.identity import Identity, check_token_syntax
from raftbus.gateway.options import GatewayOptions


class FakeClients:
    def __init__(self, credentials: dict):
        self.credentials = credentials
        self.closed = False

    def close(self):
        self.closed = True


class Cluster:
    """Answers WhoAmI from a token table; `auth_enabled` False answers every token (and none) alike."""

    def __init__(self, tokens: dict[str, str], auth_enabled: bool = True):
        self.tokens = tokens
        self.auth_enabled = auth_enabled
        self.checks: list[str | None] = []

    def check(self, token: str | None) -> Identity:
        self.checks.append(token)
        if not self.auth_enabled:
            return Identity("", False)
        if token is None or token not in self.tokens:
            raise errors.Unauthenticated("unknown or revoked")
        return Identity(self.tokens[token], True)


class Clock:
    def __init__(self):
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def client_sets(cluster: Cluster, built: list, *, sets_max=8, per_principal_max=2, recheck_ms=1_000, clock=None):
    def connect(token):
        made = FakeClients({"token": token})
        built.append(made)
        return made
    return ClientSets(cluster.check, connect, sets_max=sets_max, per_principal_max=per_principal_max,
                      recheck_ms=recheck_ms, clock=clock or Clock())


def test_a_refused_token_builds_nothing_and_keeps_nothing():
    """Goal: junk tokens cost one check each and leave no client set behind."""
    cluster, built = Cluster({"good": "alice"}), []
    sets = client_sets(cluster, built)
    for i in range(70):
        with pytest.raises(errors.Unauthenticated):
            sets.resolve(f"junk-{i}")
    assert built == [] and sets.counts() == {}
    assert sets.resolve("good").identity == Identity("alice", True)
    assert len(built) == 1 and sets.counts() == {"alice": 1}


def test_a_principal_holds_at_most_its_share_and_the_least_recently_used_set_goes():
    """Goal: a fifth token of one principal closes that principal's least recently used set, no one else's."""
    cluster = Cluster({"a1": "alice", "a2": "alice", "a3": "alice", "b1": "bob"})
    built: list[FakeClients] = []
    sets = client_sets(cluster, built, per_principal_max=2)
    b1 = sets.resolve("b1").clients
    a1 = sets.resolve("a1").clients
    a2 = sets.resolve("a2").clients
    sets.resolve("a1")  # a1 used last: a2 is alice's least recently used
    sets.resolve("a3")
    assert sets.counts() == {"alice": 2, "bob": 1}
    assert wait_closed(a2) and not a1.closed and not b1.closed


def test_the_total_bound_closes_the_least_recently_used_set():
    """Goal: past sets_max sets, the least recently used one (of any principal) is closed."""
    cluster = Cluster({f"t{i}": f"p{i}" for i in range(5)})
    built: list[FakeClients] = []
    sets = client_sets(cluster, built, sets_max=3, per_principal_max=3)
    first = [sets.resolve(f"t{i}").clients for i in range(3)]
    sets.resolve("t0")
    sets.resolve("t3")
    assert sum(sets.counts().values()) == 3
    assert wait_closed(first[1]) and not first[0].closed and not first[2].closed


def test_a_kept_token_is_checked_again_after_recheck_ms_and_dropped_once_revoked():
    """Goal: a cached token costs no check until recheck_ms; a token revoked meanwhile then loses its set."""
    cluster, built, clock = Cluster({"t": "alice"}), [], Clock()
    sets = client_sets(cluster, built, recheck_ms=1_000, clock=clock)
    clients = sets.resolve("t").clients
    sets.resolve("t")
    assert cluster.checks == ["t"]
    clock.now_s += 1.5
    del cluster.tokens["t"]
    with pytest.raises(errors.Unauthenticated):
        sets.resolve("t")
    assert clients.closed and sets.counts() == {}


def wait_closed(clients: FakeClients) -> bool:
    from tests.helpers import wait_until
    wait_until(lambda: clients.closed, 5, 0.01, what="the evicted set closed")
    return True


def gateway(cluster: Cluster, **options) -> Gateway:
    return Gateway("127.0.0.1:1", GatewayOptions(**options), check=cluster.check, connect=FakeClients)


def test_anonymous_callers_are_refused_unless_a_principal_is_named():
    """Goal: without --anonymous, a request without a token is UNAUTHENTICATED, whatever the gateway's environment."""
    cluster = Cluster({"t": "alice"})
    plain = gateway(cluster)
    try:
        with pytest.raises(errors.Unauthenticated, match="no anonymous callers"):
            plain.caller(None)
        assert plain.caller("t").principal == "alice"
    finally:
        plain.close()


def test_anonymous_callers_act_with_the_named_principals_token(tmp_path):
    """Goal: --anonymous P with a token of P serves anonymous callers as P; a token of someone else is refused."""
    cluster = Cluster({"viewer-token": "viewer", "admin-token": "admin"})
    (tmp_path / "viewer.token").write_text("viewer-token\n")
    (tmp_path / "admin.token").write_text("admin-token\n")
    served = gateway(cluster, anonymous="viewer", anonymous_token_file=str(tmp_path / "viewer.token"))
    wrong = gateway(cluster, anonymous="viewer", anonymous_token_file=str(tmp_path / "admin.token"))
    missing = gateway(cluster, anonymous="viewer")
    try:
        served.check_anonymous()
        caller = served.caller(None)
        assert caller.principal == "viewer" and caller.clients.credentials["token"] == "viewer-token"
        for misconfigured, text in ((wrong, "holds a token of 'admin'"), (missing, "needs --anonymous-token-file")):
            with pytest.raises(errors.InvalidArgument, match=text):
                misconfigured.check_anonymous()
            with pytest.raises(errors.Unauthenticated, match="cannot serve anonymous callers"):
                misconfigured.caller(None)  # found only at request time when the cluster was out of reach at start
    finally:
        for made in (served, wrong, missing):
            made.close()


def test_a_cluster_that_checks_no_tokens_is_warned_about_once_and_marked(caplog):
    """Goal: any token is served on a cluster without auth, unmarked as checked, with one warning in the log."""
    cluster = Cluster({}, auth_enabled=False)
    open_gateway = gateway(cluster, anonymous="dev")
    try:
        with caplog.at_level(logging.WARNING, logger="raftbus.gateway"):
            callers = [open_gateway.caller(f"wrong-{i}") for i in range(5)]
        assert all(not c.token_checked for c in callers)
        warnings = [r for r in caplog.records if "does not check bearer tokens" in r.getMessage()]
        assert len(warnings) == 1
        assert open_gateway.caller(None).principal == "dev"
        assert open_gateway.caller(None).clients.credentials == {"tls_ca": False}  # no token of the environment's
    finally:
        open_gateway.close()


def test_a_token_that_cannot_be_one_is_refused_without_asking():
    """Goal: an empty, multi-word, non-ASCII or oversized token is UNAUTHENTICATED before any call."""
    for bad in ("", "a b", "tök", "x" * 10_000, "a\nb"):
        with pytest.raises(errors.Unauthenticated):
            check_token_syntax(bad)
    check_token_syntax("rbt_" + "A" * 43)
