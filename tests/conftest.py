"""What every tier shares: a 3-broker cluster per module, and the rule that keeps shared fixtures on one worker.

Tiers run in parallel under pytest-xdist with `--dist loadgroup` (see the Makefile). A test that uses a fixture
broader than one test (a module's cluster, the Spark session and cluster) is put in the xdist group of that
fixture's owner, so the fixture starts once, on one worker: the module for a module-scoped fixture, the
directory of the conftest for a package- or session-scoped one ("one Spark session per run"). Every other test
goes to whichever worker is free; tests therefore never rely on the order they run in or on a worker's state:
each uses its own topic names and tmp_path data dirs.
"""
from __future__ import annotations

import pytest

from tests.helpers import running_cluster

_SHARED_SCOPES = ("session", "package", "module")
# Tiers by the length of their longest unit of work, longest first: workers take work in collection order, so the
# Kafka group tests (one module's cluster, one worker: ~2 minutes), the chaos runs, the docs examples and the long
# system tests start at once and the many short tests fill the gaps at the end.
TIERS_LONGEST_FIRST = ("spark", "kafka", "chaos", "docs", "system", "cluster", "component", "deploy", "unit")


def tier_rank(item) -> int:
    tier = item.nodeid.split("/")[1] if item.nodeid.count("/") > 1 else ""
    return TIERS_LONGEST_FIRST.index(tier) if tier in TIERS_LONGEST_FIRST else len(TIERS_LONGEST_FIRST)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(items):
    items.sort(key=tier_rank)  # stable: a module's tests keep their order
    for item in items:
        group = shared_fixture_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def shared_fixture_group(item) -> str | None:
    """The owner of the broadest fixture of ours `item` uses beyond its own function, or None."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    best = None
    for name in info.names_closure:
        for definition in info.name2fixturedefs.get(name, ()):
            scope = definition.scope
            if scope not in _SHARED_SCOPES or not definition.baseid.startswith("tests"):
                continue  # a function's own fixture, or one of pytest's or a plugin's
            rank = _SHARED_SCOPES.index(scope)
            owner = item.module.__name__ if scope == "module" else definition.baseid
            if best is None or rank < best[0]:
                best = (rank, owner)
    return best[1] if best is not None else None


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory):
    """A plaintext 3-broker cluster shared by the tests of one module (tests that kill no broker and need no
    fresh cluster: they use topics of their own); stopped by pid after the module's last test."""
    with running_cluster(tmp_path_factory.mktemp("module-cluster")) as cluster:
        yield cluster


def pytest_collection_finish(session):
    """A worker of a `--dist loadgroup` run whose grouped tests lost their group (pytest-xdist's group suffix did
    not reach the node id, as on pytest 9.2) stops the run instead of starting shared fixtures on every worker."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [item.nodeid for item in session.items
            if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(f"--dist loadgroup did not group {len(lost)} tests, e.g. {lost[0]}: "
                                "pytest-xdist and pytest disagree on node ids (see pyproject.toml)")
