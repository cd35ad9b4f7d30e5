"""The fenced examples of README.md and docs/*.md, what each says about itself, and how the docs tier runs one.

Every fenced block has an info string (`python`, `sh`, `text`, `yaml`...). A Python or shell block is preceded by
an HTML comment (invisible once rendered) that says whether the docs tier (tests/docs) runs it:

    <!-- runnable -->                      run, in document order, after the runnable blocks before it
    <!-- runnable after README.md -->      ... and after README.md's runnable blocks
    <!-- runnable with the gateway -->     ... with `raftbus http` serving the cluster (localhost:8080)
    <!-- not run: REASON -->               why a reader cannot paste it against `raftbus dev` as is

A runnable block is written for the README's cluster, `raftbus dev` on its default ports; the tier runs it on its
own cluster by replacing each documented address by the tier's (`ADDRESSES`). A comment that ends in `→ TEXT`
(`# → TEXT`, `# what it is → TEXT`) says what the block prints: its output shows TEXT, within one line, after
what the previous such comment showed (`…` stands for any text).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Info strings of the blocks that are examples a reader runs, by the language the tier runs them in.
LANGUAGES = {"python": "python", "py": "python", "sh": "sh", "shell": "sh", "bash": "sh", "console": "sh"}

FENCE = re.compile(r"^(\s*)(```|~~~)\s*([\w+-]*)")
MARK = re.compile(r"^\s*<!--\s*(.*?)\s*-->\s*$")
RUNNABLE = re.compile(r"^runnable(?: after (?P<after>[\w./-]+\.md))?(?P<gateway> with the gateway)?$")
NOT_RUN = re.compile(r"^not run: (?P<reason>\S.*)$")
EXPECT = re.compile(r"#[^#\n]*?→\s*(?P<text>.*?)\s*$")

# The addresses of the README's cluster (`raftbus dev` on its default ports, the gateway on 8080), by the name of
# the tier's address that replaces each; the longest first, so a Kafka list is replaced whole.
ADDRESSES = [
    ("127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094", "kafka"),
    ("127.0.0.1:9092", "kafka"),
    ("127.0.0.1:7070", "bootstrap"),
    ("localhost:7070", "bootstrap"),
    ("127.0.0.1:8080", "gateway"),
    ("localhost:8080", "gateway"),
]
# How the tier runs a block of each language: a shell block stops at its first failing command, pipes included.
RUNNERS = {"python": [sys.executable], "sh": ["bash", "-e", "-o", "pipefail"]}
# Any loopback address: after the replacement a runnable block may name only the tier's own.
LOOPBACK = re.compile(r"\b(?:127\.0\.0\.1|localhost):\d+\b")


@dataclass
class Block:
    doc: str            # path relative to the repository root, e.g. "docs/queues.md"
    line: int           # line of the opening fence, 1-based
    info: str           # the fence's info string
    code: str
    mark: str | None    # the text of the comment before the fence, None without one
    runnable: bool = False
    after: str | None = None
    gateway: bool = False
    reason: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def language(self) -> str | None:
        return LANGUAGES.get(self.info)

    def expected(self) -> list[str]:
        """The `# →` texts of the block, in order."""
        return [m.group("text") for m in map(EXPECT.search, self.code.splitlines()) if m]


def blocks(doc: Path, root: Path = ROOT) -> list[Block]:
    """Every fenced block of `doc`, with its marker read and what is wrong with the marking in `problems`."""
    name = str(doc.relative_to(root))
    lines = doc.read_text().splitlines()
    found, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence, info = opening.groups()
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        code = "\n".join(line[len(indent):] if line.startswith(indent) else line for line in lines[index + 1:end])
        previous = lines[index - 1] if index > 0 else ""
        mark = MARK.match(previous)
        found.append(_read_mark(Block(name, index + 1, info.lower(), code + "\n", mark.group(1) if mark else None)))
        index = end + 1
    return found


def _read_mark(block: Block) -> Block:
    if not block.info:
        block.problems.append("a fence without an info string (python, sh, text...)")
    if block.mark is None:
        if block.language:
            block.problems.append("no <!-- runnable --> or <!-- not run: reason --> comment before it")
        return block
    runnable, not_run = RUNNABLE.match(block.mark), NOT_RUN.match(block.mark)
    if runnable:
        block.runnable, block.after, block.gateway = True, runnable.group("after"), bool(runnable.group("gateway"))
        if not block.language:
            block.problems.append(f"marked runnable, but the tier runs only {sorted(set(LANGUAGES))} blocks")
        elif block.after and not (ROOT / block.after).is_file():
            block.problems.append(f"runnable after {block.after}, which does not exist")
        strange = sorted(set(LOOPBACK.findall(localized(block.code, {}))))
        if strange:
            block.problems.append(f"names {', '.join(strange)}, which the docs tier does not map to its own cluster")
    elif not_run:
        block.reason = not_run.group("reason")
    elif block.language:
        block.problems.append(f"the comment before it is neither runnable nor 'not run: reason': {block.mark!r}")
    return block


def marking_problems(doc: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the marking of `doc`'s blocks: one line per block, and per marker that marks no block."""
    problems = [f"{b.name}: {problem}" for b in blocks(doc, root) for problem in b.problems]
    lines = doc.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        mark = MARK.match(line)
        if mark and (RUNNABLE.match(mark.group(1)) or NOT_RUN.match(mark.group(1))):
            following = lines[number] if number < len(lines) else ""
            if not FENCE.match(following):
                problems.append(f"{doc.relative_to(root)}:{number}: a marker that is not right before a fence")
    return problems


def localized(code: str, addresses: dict[str, str]) -> str:
    """`code` with each documented address replaced by the tier's address of that name (left out of `code`
    when `addresses` lacks it, so what remains are the addresses no one maps)."""
    for documented, name in ADDRESSES:
        code = code.replace(documented, addresses.get(name, ""))
    return code


def runnable_blocks() -> list[Block]:
    """Every runnable block of README.md and docs/*.md: README.md first, then docs/ by name, each in its order."""
    return [block for doc in DOCS for block in blocks(doc) if block.runnable]


def unmatched(expected: list[str], output: str) -> str | None:
    """The first expected text that `output` does not print after the previous one, or None. A text is found
    within one line, spaces compared as one, not glued to a letter or digit at either end (`1 False` is not read in
    `11 False`); `…` stands for any text."""
    lines = [" ".join(line.split()) for line in output.splitlines()]
    line, column = 0, 0
    for text in expected:
        text = " ".join(text.split())
        pattern = re.compile((r"(?<!\w)" if re.match(r"\w", text) else "")
                             + ".*?".join(map(re.escape, text.split("…")))
                             + (r"(?!\w)" if re.search(r"\w$", text) else ""))
        while line < len(lines):
            found = pattern.search(lines[line], column)
            if found:
                column = found.end()
                break
            line, column = line + 1, 0
        else:
            return text
    return None


def reader_env() -> dict[str, str]:
    """This process's environment without RAFTBUS_* settings: the cluster and the examples see what a reader's
    fresh shell has (no TLS, token or secret variables a test may have set)."""
    return {name: value for name, value in os.environ.items() if not name.startswith("RAFTBUS_")}


def run_example(block: Block, addresses: dict[str, str], work_dir: Path, timeout_s: float) -> str | None:
    """Run `block` as a reader pastes it, on the cluster at `addresses` (ADDRESSES' names), in `work_dir`, with
    the venv's commands first on PATH as after `. .venv/bin/activate`: None when it ends within `timeout_s` with
    status 0, no traceback and the output its `→` comments say, else what went wrong with its output."""
    source = work_dir / f"example-{Path(block.doc).stem}-{block.line}.{block.language}"
    source.write_text(localized(block.code, addresses))
    bin_dir = str(Path(sys.executable).parent)
    env = {**reader_env(), "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHONUNBUFFERED": "1"}
    if "bootstrap" in addresses:
        env["RAFTBUS_BOOTSTRAP"] = addresses["bootstrap"]
    proc = subprocess.Popen(RUNNERS[block.language] + [str(source)], cwd=work_dir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the example's own process group, its children included
        out, err = proc.communicate()
        return f"{block.name} did not end within {timeout_s:g} s" + _shown(out, err)
    if "Traceback (most recent call last)" in out + err:
        return f"{block.name} printed a traceback" + _shown(out, err)
    if proc.returncode != 0:
        return f"{block.name} exited with {proc.returncode}" + _shown(out, err)
    missing = unmatched(block.expected(), out)
    if missing is not None:
        return f"{block.name} did not print {missing!r} where its `→` comments say" + _shown(out, err)
    return None


def _shown(out: str, err: str) -> str:
    return f"\n--- stdout ---\n{out[-4000:]}\n--- stderr ---\n{err[-4000:]}"
