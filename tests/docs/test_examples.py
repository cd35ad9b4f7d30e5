"""Goal: every runnable Python and shell example of README.md and docs/*.md runs as a reader pastes it, against
one real `raftbus dev` cluster, and ends by itself, without a traceback, with exit status 0 and with the output its
`→` comments say (tests/doc_examples.py has the marking; a unit test checks every block is marked)."""
from __future__ import annotations

import pytest

from tests.doc_examples import Block, run_example, runnable_blocks

pytestmark = pytest.mark.docs

# Each example ends by itself well within this, on a loaded machine too (a consumer loop stops a few seconds after
# its last record); an example still running then is a hang.
EXAMPLE_TIMEOUT_S = 180.0
BLOCKS = runnable_blocks()


class Runs:
    """What each block did on the tier's cluster: its failure, or None once it ran well. A block runs at most once,
    after the runnable blocks it follows (those before it in its doc, and its `after` doc's), so one test of a
    block alone (-k) sees the state its doc builds up to it."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.failures: dict[str, str | None] = {}

    def prerequisites(self, block: Block) -> list[Block]:
        earlier = [b for b in BLOCKS if b.doc == block.doc and b.line < block.line]
        after = [b for b in BLOCKS if b.doc == block.after] if block.after else []
        return after + earlier

    def run(self, block: Block) -> str | None:
        if block.name not in self.failures:
            for needed in self.prerequisites(block):
                if self.run(needed) is not None:
                    return f"{block.name} follows {needed.name}, which failed"
            self.failures[block.name] = self._execute(block)
        return self.failures[block.name]

    def _execute(self, block: Block) -> str | None:
        addresses = dict(self.cluster.addresses)
        if block.gateway:
            addresses["gateway"] = self.cluster.gateway()
        return run_example(block, addresses, self.cluster.work_dir, EXAMPLE_TIMEOUT_S)


@pytest.fixture(scope="module")
def runs(docs_cluster):
    return Runs(docs_cluster)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.name)
def test_example_runs_as_written(block, runs):
    """Goal: this example, pasted after the ones before it, ends by itself with what its comments say."""
    failure = runs.run(block)
    assert failure is None, failure
