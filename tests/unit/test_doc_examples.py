"""Goal: every Python and shell block of README.md and docs/*.md says whether the docs tier runs it (and if not,
why), so no example a reader may paste goes untested by accident; and the tier reads markers, addresses and the
`→` comments of its examples as tests/doc_examples.py describes."""
from __future__ import annotations

import pytest

from tests.doc_examples import (DOCS, ROOT, blocks, localized, marking_problems, run_example, runnable_blocks,
                                 unmatched)


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_every_example_is_run_or_says_why_not(doc):
    """Goal: each Python or shell block of the doc is marked runnable or not run with a reason."""
    problems = marking_problems(doc)
    assert not problems, "\n".join(problems)


def test_the_readme_examples_are_run():
    """Goal: the README's SDK, CLI, Kafka and HTTP examples are among the runnable blocks (a marking that turned
    them all off would leave the tier nothing to run)."""
    readme = [b for b in runnable_blocks() if b.doc == "README.md"]
    assert [b.language for b in readme].count("python") >= 4 and [b.language for b in readme].count("sh") >= 3
    assert any(b.gateway for b in readme)


def test_unmarked_untagged_and_stray_markers_are_named(tmp_path):
    """Goal: the marking check names each kind of mistake, at its line, and passes the well-marked blocks."""
    doc = tmp_path / "page.md"
    doc.write_text("\n".join([
        "<!-- runnable -->",                          # 1
        "```python",                                  # 2  fine
        "print('hi')   # → hi",
        "```",
        "```sh",                                      # 5  unmarked shell
        "ls",
        "```",
        "```",                                        # 8  no info string
        "ls",
        "```",
        "<!-- not run: needs Spark -->",              # 11
        "```python",                                  # 12 fine
        "spark.stop()",
        "```",
        "<!-- not run: -->",                          # 15 no reason
        "```sh",
        "ls",
        "```",
        "<!-- runnable -->",                          # 19 a marker before prose
        "",
        "<!-- runnable -->",                          # 21 the default ports of a broker the tier does not map
        "```sh",
        "raftbus topics list --bootstrap 127.0.0.1:7071",
        "```",
        "<!-- runnable after NOWHERE.md -->",         # 25
        "```sh",
        "ls",
        "```",
        "<!-- not run: a list, not a script -->",     # 29 yaml needs no marker, but may have one
        "```yaml",
        "a: 1",
        "```",
    ]) + "\n")
    assert marking_problems(doc, tmp_path) == [
        "page.md:5: no <!-- runnable --> or <!-- not run: reason --> comment before it",
        "page.md:8: a fence without an info string (python, sh, text...)",
        "page.md:16: the comment before it is neither runnable nor 'not run: reason': 'not run:'",
        "page.md:22: names 127.0.0.1:7071, which the docs tier does not map to its own cluster",
        "page.md:26: runnable after NOWHERE.md, which does not exist",
        "page.md:19: a marker that is not right before a fence",
    ]
    found = blocks(doc, tmp_path)
    assert [(b.line, b.runnable, b.reason) for b in found if not b.problems] == [
        (2, True, None), (12, False, "needs Spark"), (30, False, "a list, not a script")]
    assert found[0].expected() == ["hi"]


def test_documented_addresses_become_the_tiers():
    """Goal: a Kafka list is replaced whole, the bootstrap and gateway addresses by the tier's, and an address
    without a tier address is left out (so the marking check sees only what no one maps)."""
    code = ('Producer({"bootstrap.servers": "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"})\n'
            "kcat -b 127.0.0.1:9092 -L; Admin('127.0.0.1:7070'); curl localhost:8080/v1; raftbus --bootstrap "
            "localhost:7070\n")
    tier = {"kafka": "127.0.0.1:4001,127.0.0.1:4002", "bootstrap": "127.0.0.1:5001,127.0.0.1:5003",
            "gateway": "127.0.0.1:6001"}
    assert localized(code, tier) == (
        'Producer({"bootstrap.servers": "127.0.0.1:4001,127.0.0.1:4002"})\n'
        "kcat -b 127.0.0.1:4001,127.0.0.1:4002 -L; Admin('127.0.0.1:5001,127.0.0.1:5003'); "
        "curl 127.0.0.1:6001/v1; raftbus --bootstrap 127.0.0.1:5001,127.0.0.1:5003\n")
    assert localized("curl localhost:8080/v1", {}) == "curl /v1"


def test_expected_output_is_found_in_order_within_a_line():
    """Goal: `→` texts are found in the output in their order, within one line, spaces compared as one, `…` for
    any text, and not inside a longer number or word."""
    out = 'orders 2 0\n11 False\n{"name":"c"}{"offsets":[{"partition":2,"offset":7}]}\nemails/0#1\tacked\tpriority=1\n'
    assert unmatched(["orders 2 0", '{"offsets":[{"partition":2,"offset":…}]}', "emails/0#1 acked …"], out) is None
    assert unmatched(["1 False"], out) == "1 False"                  # only `11 False` is printed
    assert unmatched(['{"offsets":…}', "orders 2 0"], out) == "orders 2 0"   # out of order
    assert unmatched(["emails/0#1 in_flight …"], out) == "emails/0#1 in_flight …"
    assert unmatched([], "") is None


def test_the_runner_fails_a_traceback_an_exit_a_hang_and_a_contradicted_comment(tmp_path):
    """Goal: an example fails when it prints a traceback (even with status 0), exits non-zero, does not end
    within the bound (its process group is killed), or prints other than its `→` comment; one that does what it
    says passes, with the documented address replaced and RAFTBUS_BOOTSTRAP set as a reader's cluster would be."""
    doc = tmp_path / "page.md"
    examples = {
        "ok": ("python", 'import os\nprint("127.0.0.1:7070", os.environ["RAFTBUS_BOOTSTRAP"])   # → tier:1 tier:1\n'),
        "traceback": ("python", "import threading\nthreading.Thread(target=lambda: 1 / 0).start()\n"),
        "exit": ("sh", "echo started\nfalse\necho never\n"),
        "pipe": ("sh", "false | cat\n"),
        "hang": ("sh", "sleep 60 &\nwait\n"),
        "contradicted": ("sh", "echo 'emails/0#1 in_flight'   # → emails/0#1 acked …\n"),
    }
    lines = []
    for name, (language, code) in examples.items():
        lines += [f"## {name}", "<!-- runnable -->", f"```{language}", *code.splitlines(), "```"]
    doc.write_text("\n".join(lines) + "\n")
    found = dict(zip(examples, blocks(doc, tmp_path)))
    verdicts = {name: run_example(block, {"bootstrap": "tier:1"}, tmp_path, timeout_s=3)
                for name, block in found.items()}
    assert verdicts["ok"] is None
    assert verdicts["traceback"].startswith(f"{found['traceback'].name} printed a traceback")
    assert verdicts["exit"].startswith(f"{found['exit'].name} exited with 1") and "never" not in verdicts["exit"]
    assert verdicts["pipe"].startswith(f"{found['pipe'].name} exited with 1")
    assert verdicts["hang"].startswith(f"{found['hang'].name} did not end within 3 s")
    assert verdicts["contradicted"].startswith(f"{found['contradicted'].name} did not print 'emails/0#1 acked …'")
