"""The chaos tier: real broker processes under kill -9, SIGSTOP/SIGCONT, restarts, a full disk and damaged files,
each run checked by the history checker (0 acknowledged loss, 0 duplicates, gapless offsets), byte-identical
replicas afterwards and committed group offsets that never move backwards. Bounded to a few minutes in all."""
import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/chaos/" in str(item.fspath):
            item.add_marker(pytest.mark.chaos)


@pytest.fixture
def cluster(tmp_path):
    from tests.system.conftest import running_cluster

    with running_cluster(tmp_path) as cluster:
        yield cluster
