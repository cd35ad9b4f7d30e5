"""Goal: every file, folder, link and `python -m` module that README.md and docs/*.md name exists in the
repository, so a reader who follows a doc never lands on a path that moved or was removed."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Top-level entries a doc may name by their repository path (the design card's folders and the root files).
TOP_LEVEL = ("broker", "client", "proto", "config", "tests", "docs")
ROOT_FILES = ("Makefile", "setup.py", "pyproject.toml", "README.md", "LICENSE")
EXTENSIONS = ("py", "md", "toml", "proto", "json", "yaml", "yml", "example", "service", "css", "js", "html",
              "txt", "cfg", "ini", "sh", "dockerignore")

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A repository path: a top-level folder then at least one more part; not inside another path or a URL.
REPO_PATH = re.compile(r"(?<![\w./~$<-])((?:%s)/[\w./@-]*)" % "|".join(TOP_LEVEL))
# A path below some package, named from inside it (`state/runs.py`, `raft/latency.py`), outside code blocks.
PARTIAL_PATH = re.compile(r"(?<![\w./~$<-])((?:[\w-]+/)+[\w-]+\.(?:%s))\b" % "|".join(EXTENSIONS))
# A doc named by its bare file name (`storage.md`, "replication.md, Failover").
BARE_DOC = re.compile(r"(?<![\w./-])([\w-]+\.md)\b")
# A section named beside its doc: `storage.md, "Open files"` or `(replication.md, Failover)`.
SECTION = re.compile(r'([\w-]+\.md),\s+(?:"([^"]+)"|([A-Z][\w-]*)(?=[);,]))')
BOLD_LEAD = re.compile(r"\*\*([^*]+)\*\*")
PYTHON_M = re.compile(r"python3? -m ((?:raftbus)(?:\.\w+)+)")
FENCE = re.compile(r"^(```|~~~)")


def _split_fences(text: str) -> tuple[str, str]:
    """The doc's prose and its fenced code blocks, each as one text (line numbers are not needed)."""
    prose, code, inside = [], [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            inside = not inside
            continue
        (code if inside else prose).append(line)
    return "\n".join(prose), "\n".join(code)


def _heading_anchors(doc: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file."""
    prose, _ = _split_fences(doc.read_text())
    anchors = set()
    for line in prose.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def _section_titles(doc: Path) -> list[str]:
    """The headings and bold paragraph leads of a Markdown file, lower case: what a reference may name."""
    prose, _ = _split_fences(doc.read_text())
    titles = [line.lstrip("#").strip() for line in prose.splitlines() if line.startswith("#")]
    return [t.lower() for t in titles + BOLD_LEAD.findall(prose)]


def _tracked_suffixes() -> set[str]:
    """Every tail of every file path under the top-level folders: `state/runs.py` for broker/queues/state/runs.py."""
    tails = set()
    for top in TOP_LEVEL:
        for path in (ROOT / top).rglob("*"):
            parts = path.relative_to(ROOT).parts
            for start in range(1, len(parts)):
                tails.add("/".join(parts[start:]))
    return tails


def missing_references(doc_name: str, text: str, root: Path = ROOT, suffixes: set[str] | None = None) -> list[str]:
    """What `text` (the doc `doc_name`, relative to root) names that does not exist: one line per reference."""
    doc_dir = (root / doc_name).parent
    prose, code = _split_fences(text)
    missing = []

    for target in LINK.findall(prose):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        linked = (doc_dir / path_part).resolve() if path_part else (root / doc_name)
        if not linked.exists():
            missing.append(f"link {target}")
        elif anchor and linked.suffix == ".md" and anchor not in _heading_anchors(linked):
            missing.append(f"link {target} (no such heading)")

    for source in (prose, code):
        for raw in REPO_PATH.findall(source):
            path = raw.split("::")[0].rstrip(".,;:)")
            if any(ch in path for ch in "*{<") or path.endswith("/."):
                continue
            if not (root / path).exists():
                missing.append(f"path {path}")

    if suffixes is None:
        suffixes = _tracked_suffixes()
    for raw in PARTIAL_PATH.findall(prose):
        if raw.split("/")[0] in TOP_LEVEL or raw in suffixes or (root / raw).exists():
            continue
        missing.append(f"path {raw} (no file ends with it)")

    generated = (root / "Makefile").read_text() if (root / "Makefile").exists() else ""
    for name in BARE_DOC.findall(LINK.sub("", prose)):
        if name in ROOT_FILES or (doc_dir / name).exists() or (root / "docs" / name).exists():
            continue
        if re.search(r"(?<![\w.-])%s\b" % re.escape(name), generated):  # an output `make` writes
            continue
        missing.append(f"doc {name}")

    for name, quoted, word in SECTION.findall(prose):
        target = next((d for d in (doc_dir / name, root / "docs" / name, root / name) if d.exists()), None)
        wanted = " ".join((quoted or word).split()).lower()
        if target is not None and not any(t.startswith(wanted) for t in _section_titles(target)):
            missing.append(f"section {name}, {quoted or word!r}")

    for module in PYTHON_M.findall(prose + "\n" + code):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(f"module {module} (python -m)")
    return sorted(set(missing))


@pytest.fixture(scope="module")
def suffixes():
    return _tracked_suffixes()


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_every_named_file_exists(doc, suffixes):
    """Goal: each doc names only files, folders, headings and modules the repository has."""
    name = str(doc.relative_to(ROOT))
    missing = missing_references(name, doc.read_text(), suffixes=suffixes)
    assert not missing, f"{name} names what does not exist:\n  " + "\n  ".join(missing)


def test_a_missing_file_is_named(tmp_path):
    """Goal: the scan finds each kind of reference to something that does not exist, and only those."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "broker" / "log").mkdir(parents=True)
    (tmp_path / "broker" / "log" / "state.py").write_text("")
    (tmp_path / "docs" / "storage.md").write_text("# Storage\n\n## Open files\n")
    text = "\n".join([
        "Applied by `broker/log/state.py` (exists) and `broker/log/gone.py` (does not).",
        "See [storage](storage.md#open-files), [layout](storage.md#layout) and [old](old.md).",
        "Handled in `log/state.py` and `log/missing.py`; replication.md, Failover.",
        "```sh",
        "python -m raftbus.no_such_module --flag",
        "cat tests/system/test_x.py",
        "```",
        "`make bench` writes bench-results.md.",
    ])
    (tmp_path / "Makefile").write_text("bench:\n\traftbus bench all --table-out bench-results.md\n")
    missing = missing_references("docs/page.md", text, root=tmp_path,
                                 suffixes={"log/state.py", "state.py"})
    assert missing == [
        "doc replication.md",
        "link old.md",
        "link storage.md#layout (no such heading)",
        "module raftbus.no_such_module (python -m)",
        "path broker/log/gone.py",
        "path log/missing.py (no file ends with it)",
        "path tests/system/test_x.py",
    ]
