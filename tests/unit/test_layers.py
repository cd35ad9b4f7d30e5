"""Goal: every import between raftbus's packages goes in an allowed direction (docs/architecture.md), so a feature
package never reaches up into the server or sideways into a feature it does not build on."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# broker: layer of a module -> layers it may import (its own layer always allowed)
BROKER_KERNEL = {"model", "clock", "commands", "context", "leaders", "grpc_server", "settings", "call_limits",
                 "content_digest"}
BROKER_TOP = {"server", "main", "demo", "queue_apply_cost", "__main__", ""}
BROKER_ALLOWED = {
    "storage": set(),
    "raft": {"storage"},
    "kernel": {"raft", "storage"},
    "groups": {"kernel"},
    "log": {"kernel", "groups"},
    "queues": {"kernel"},
    "admin": {"kernel", "groups", "queues", "security"},
    "security": {"kernel"},
    "metrics": {"kernel", "raft"},  # reads live state through the broker object it is handed, imports no feature
    "kafka": {"kernel", "log", "admin", "security"},  # the Kafka port: transport over the same services
}
# what the broker below its top layer may use of the client package: the wire protocol and shared codecs
BROKER_CLIENT_MODULES = ("errors", "records", "kafka_batch", "wire", "router", "credentials", "queues.codec",
                         "queues.ids")

CLIENT_KERNEL = {"errors", "records", "kafka_batch", "router", "settings", "murmur2", "wire", "produce_stream",
                 "sender", "credentials", "record_batch", "record_future"}
CLIENT_FACADES = {"", "admin", "producer", "consumer", "reader", "security", "membership"}
CLIENT_APPS = {"cli", "bench", "spark", "http", "aio", "backup"}
CLIENT_ALLOWED = {
    "kernel": set(),
    "queues": {"kernel"},
    "groups": {"kernel"},
    "facades": {"kernel", "queues", "groups"},
}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = [p for p in path.relative_to(root).with_suffix("").parts if p != "__init__"]
    return ".".join(["raftbus", *parts])


def imported_modules(path: Path) -> set[str]:
    """Absolute raftbus module names a file imports (an imported name may be a module or an attribute)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("raftbus"):
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("raftbus"))
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.add("<relative>")
    return found


def layer_of(name: str, groups: dict[str, set[str]]) -> str:
    """The layer of module `name`: the group its first name under raftbus.broker/client belongs to, else that name
    (a feature package is its own layer)."""
    first = (name.split(".")[2:] or [""])[0]
    return next((layer for layer, members in groups.items() if first in members), first)


BROKER_GROUPS = {"top": BROKER_TOP, "kernel": BROKER_KERNEL}
CLIENT_GROUPS = {"kernel": CLIENT_KERNEL, "facades": CLIENT_FACADES, "apps": CLIENT_APPS}


def broker_layer(name: str) -> str:
    return layer_of(name, BROKER_GROUPS)


def client_layer(name: str) -> str:
    return layer_of(name, CLIENT_GROUPS)


def source_files(folder: str):
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "wire" not in p.relative_to(ROOT).parts)


def broker_violations(path: Path, root: Path = ROOT) -> list[str]:
    name, found = module_name(path, root), []
    layer = broker_layer(name)
    for target in imported_modules(path):
        if target == "<relative>":
            found.append(f"{name} uses a relative import")
        elif target.startswith("raftbus.client"):
            rest = target[len("raftbus.client."):]
            if layer != "top" and not rest.startswith(BROKER_CLIENT_MODULES):
                found.append(f"{name} ({layer}) imports {target}")
        elif target.startswith("raftbus.broker"):
            other = broker_layer(target)
            if layer != "top" and other not in {layer} | BROKER_ALLOWED[layer]:
                found.append(f"{name} ({layer}) imports {target} ({other})")
    return found


def client_violations(path: Path, root: Path = ROOT) -> list[str]:
    name, found = module_name(path, root), []
    layer = client_layer(name)
    for target in imported_modules(path):
        if target.startswith("raftbus.broker"):
            found.append(f"{name} imports the broker: {target}")
        elif target.startswith("raftbus.client") and layer != "apps":
            other = client_layer(target)
            if other not in {layer} | CLIENT_ALLOWED.get(layer, set()):
                found.append(f"{name} ({layer}) imports {target} ({other})")
    return found


@pytest.mark.parametrize("path", source_files("broker"), ids=lambda p: str(p.relative_to(ROOT)))
def test_broker_modules_import_only_downwards(path):
    assert broker_violations(path) == []


@pytest.mark.parametrize("path", source_files("client"), ids=lambda p: str(p.relative_to(ROOT)))
def test_client_modules_import_only_downwards(path):
    assert client_violations(path) == []


def test_the_checker_rejects_upward_and_sideways_imports(tmp_path):
    cases = {
        "broker/groups/bad.py": ("from raftbus.broker.log.state import PartitionStateMachine\n", "imports"),
        "broker/storage/bad.py": ("from raftbus.broker.server import Broker\n", "imports"),
        "broker/queues/bad.py": ("from raftbus.client.producer import Producer\n", "imports"),
        "broker/log/rel.py": ("from ..groups import state\n", "relative"),
    }
    for rel, (text, word) in cases.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        assert any(word in v for v in broker_violations(path, tmp_path)), rel
    client_cases = {
        "client/queues/bad.py": "from raftbus.client.producer import Producer\n",
        "client/router.py": "from raftbus.client.bench.runner import main\n",
        "client/reader.py": "from raftbus.broker.model import Topic\n",
    }
    for rel, text in client_cases.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        assert client_violations(path, tmp_path), rel

