"""Goal: pysyncobj's code is known to one package only (broker/raft/pysyncobj/), which everything else reaches
through its exported interface, and Raft code reads time only through the clock it is handed."""
from __future__ import annotations

import ast
import functools
import tomllib
from pathlib import Path

import pytest

from raftbus.broker.raft import pysyncobj as adapter

ROOT = Path(__file__).resolve().parents[4]
ADAPTER = ROOT / "broker" / "raft" / "pysyncobj"
ADAPTER_MODULE = "raftbus.broker.raft.pysyncobj"
CLOCK_OWNER = ROOT / "broker" / "raft" / "clock.py"
# pysyncobj's mangled private names: SyncObj's own and those of the helpers it kept private state in.
PRIVATE_PREFIXES = ("_SyncObj__", "_FastQueue__", "_PipeNotifier__", "_Serializer__", "_Transport__", "_Node__")
# Names under which Raft code holds the core (RaftGroup.raft, Replication._raft, the harness's groups' .raft).
CORE_HOLDERS = {"raft", "_raft"}
TIME_READS = {"time", "monotonic", "monotonic_ns", "sleep", "perf_counter", "perf_counter_ns", "time_ns",
              "clock_gettime", "clock_gettime_ns"}


def python_files(*folders: str):
    for folder in folders:
        yield from sorted(p for p in (ROOT / folder).rglob("*.py") if ".venv" not in p.parts)


def outside_adapter():
    """Every module but the adapter's (and this test, which names what it looks for)."""
    return [p for p in python_files("broker", "client", "tests")
            if ADAPTER not in p.parents and p != Path(__file__).resolve()]


def parse(path: Path) -> ast.AST:
    return ast.parse(path.read_text(), filename=str(path))


def holder_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


@functools.cache
def outside_findings() -> tuple[list[str], list[str]]:
    """One walk over every module outside the adapter: (uses of pysyncobj, reaches into the core)."""
    uses, reaches = [], []
    for path in outside_adapter():
        for node in ast.walk(parse(path)):
            problem = pysyncobj_use(node)
            if problem:
                uses.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')} {problem}")
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and holder_name(node.value) in CORE_HOLDERS:
                reaches.append(f"{path.relative_to(ROOT)}:{node.lineno} reads {holder_name(node.value)}.{node.attr}")
    return uses, reaches


def test_no_module_outside_the_adapter_imports_pysyncobj_or_its_private_names():
    uses, _ = outside_findings()
    assert not uses, "\n".join(uses)


def pysyncobj_use(node: ast.AST) -> str | None:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names
                 if a.name.split(".")[0] == "pysyncobj" or a.name.startswith(f"{ADAPTER_MODULE}.")]
        return f"imports {names}" if names else None
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module.split(".")[0] == "pysyncobj" or node.module.startswith(f"{ADAPTER_MODULE}."):
            return f"imports from {node.module} (only {ADAPTER_MODULE} is the interface)"
        if node.module == ADAPTER_MODULE:
            hidden = [a.name for a in node.names if a.name not in adapter.__all__]
            return f"imports {hidden}, which the adapter does not export" if hidden else None
        return None
    if isinstance(node, ast.Attribute) and node.attr.startswith(PRIVATE_PREFIXES):
        return f"uses pysyncobj's private {node.attr}"
    if isinstance(node, ast.Name) and node.id.startswith(PRIVATE_PREFIXES):
        return f"uses pysyncobj's private {node.id}"
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
            any(prefix in node.value for prefix in PRIVATE_PREFIXES):
        return "names pysyncobj's private attributes in a string (getattr?)"
    return None


def test_no_module_outside_the_adapter_reaches_into_the_core():
    """`<...>.raft._anything` or `self._raft._anything`: the core's underscore names are its own."""
    _, reaches = outside_findings()
    assert not reaches, "\n".join(reaches)


def test_the_adapter_exports_what_it_names():
    assert set(adapter.__all__) <= set(dir(adapter))
    assert {"RaftNode", "RaftOptions", "Role", "Outcome"} <= set(adapter.__all__)


def test_raftbus_depends_on_no_pysyncobj_release_and_ships_its_license():
    """The consensus code is vendored: no pysyncobj package is installed for raftbus, and its MIT license travels
    with the code that came from it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *(r for extra in project.get("optional-dependencies", {}).values()
                                                for r in extra)]
    assert not [r for r in requirements if r.lower().replace("-", "").startswith("pysyncobj")]
    license_text = (ADAPTER / "LICENSE").read_text()
    assert "MIT License" in license_text and "Filipp Ozinov" in license_text
    assert "LICENSE" in (ROOT / "setup.py").read_text().split("raftbus.broker.raft.pysyncobj")[1].split("]")[0]


def raft_modules():
    return list(python_files("broker/raft"))


@pytest.mark.parametrize("path", raft_modules(), ids=lambda p: str(p.relative_to(ROOT / "broker" / "raft")))
def test_raft_code_reads_time_only_through_its_clock(path):
    """No module under broker/raft but broker/raft/clock.py imports `time` or calls one of its clocks or sleep;
    the others take a clock (monotonic seconds) from the loop, or as a parameter defaulting to clock.py's."""
    if path == CLOCK_OWNER:
        return
    found = []
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name in ("time", "datetime")]
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
            found.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "time" \
                and node.attr in TIME_READS:
            found.append(f"line {node.lineno}: time.{node.attr}")
        elif isinstance(node, ast.Attribute) and node.attr in ("monotonic", "raft_monotonic"):
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in ("raft_monotonic", "monotonicTime"):
            found.append(f"line {node.lineno}: {node.id}")
    assert not found, f"{path.relative_to(ROOT)} reads the time itself: " + "; ".join(found)


@pytest.mark.parametrize("path", raft_modules(), ids=lambda p: str(p.relative_to(ROOT / "broker" / "raft")))
def test_raft_code_never_unpickles(path):
    """No module under broker/raft imports pickle (or its C twin): nothing a peer or a file holds is unpickled."""
    for node in ast.walk(parse(path)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        assert not [n for n in names if n.split(".")[0] in ("pickle", "_pickle", "cPickle", "dill", "shelve")], \
            f"{path.relative_to(ROOT)}:{node.lineno} imports {names}"
