"""Goal: every import between raftbus's packages goes in an allowed direction (docs/architecture.md), so a feature
package never reaches up into the server or sideways into a feature it does not build on."""
from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# broker: layer of a module -> layers it may import (its own layer always allowed)
BROKER_KERNEL = {"model", "clock", "commands", "context", "leaders", "peer_calls", "grpc_server", "call_limits", "content_digest",
                 "node", "raft_settings", "registry", "process_stats", "heap"}
# settings composes every feature's section, assembly builds every feature, replicas makes the partition replicas of
# each kind: they build a broker from its parts, as server does; ports checks the process's listeners before main
# starts it
BROKER_TOP = {"server", "main", "demo", "__main__", "", "settings", "replicas", "assembly", "ports"}
BROKER_ALLOWED = {
    # a settings section is declared beside its feature, infra included: `section` (its fields and checks) is
    # below everything and imports nothing of the broker
    "section": set(),
    "storage": {"section"},
    "raft": {"storage", "section"},
    "kernel": {"raft", "storage", "section"},
    "groups": {"kernel", "section"},
    "log": {"kernel", "groups", "section"},
    "queues": {"kernel", "section"},
    "metadata": {"kernel", "groups", "queues", "security", "section"},
    "security": {"kernel", "section"},
    "metrics": {"kernel", "raft", "section"},  # reads live state through the broker object it is handed
    # where leaderships go (gossip, preferred leaders, drain): over the loop, transport and faults of raft/
    "leadership": {"kernel", "raft", "section"},
    "kafka": {"kernel", "log", "metadata", "security", "groups", "section"},  # the Kafka port: the same services
}
# what the broker below its top layer may use of the client package: the wire protocol and shared codecs
BROKER_CLIENT_MODULES = ("errors", "records", "kafka_batch", "wire", "router", "credentials", "queues.codec",
                         "queues.ids")

CLIENT_KERNEL = {"errors", "records", "kafka_batch", "router", "settings", "murmur2", "wire", "produce_stream",
                 "sender", "producer_lane", "credentials", "record_batch", "record_future", "reachability"}
CLIENT_FACADES = {"", "admin", "producer", "consumer", "reader", "security", "cluster_admin", "table"}
CLIENT_APPS = {"spark", "aio", "backup"}
CLIENT_ALLOWED = {
    "kernel": set(),
    "queues": {"kernel"},
    "groups": {"kernel"},
    "facades": {"kernel", "queues", "groups"},
}


# folders of client/ installed as packages of their own (setup.py), not as part of the SDK
APP_FOLDERS = {("client", "cli"): "cli", ("client", "bench"): "bench", ("client", "gateway"): "gateway"}
# what each of those packages may import (raftbus.<name>); the SDK imports none of them
APPS_ALLOWED = {
    "cli": {"raftbus.client", "raftbus.broker.main", "raftbus.broker.supervisor", "raftbus.broker.tls_dev", "raftbus.gateway", "raftbus.bench"},
    "bench": {"raftbus.client", "raftbus.broker", "raftbus.gateway"},
    "gateway": {"raftbus.client"},
}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = [p for p in path.relative_to(root).with_suffix("").parts if p != "__init__"]
    app = APP_FOLDERS.get(tuple(parts[:2]))
    if app is not None:
        return ".".join(["raftbus", app, *parts[2:]])
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


def source_files(folder: str, root: Path = ROOT):
    """The modules of `folder`, without generated code and without the app folders nested in it."""
    nested = [root.joinpath(*parts) for parts in APP_FOLDERS if root.joinpath(*parts) != root / folder]
    return sorted(p for p in (root / folder).rglob("*.py") if "wire" not in p.relative_to(root).parts
                  and not any(n in p.parents for n in nested))


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
        if target.split(".")[1] in APPS_ALLOWED:
            found.append(f"{name} (the SDK) imports {target}, which is not the SDK")
        elif target.startswith("raftbus.broker"):
            found.append(f"{name} imports the broker: {target}")
        elif target.startswith("raftbus.client") and layer != "apps":
            other = client_layer(target)
            if other not in {layer} | CLIENT_ALLOWED.get(layer, set()):
                found.append(f"{name} ({layer}) imports {target} ({other})")
    return found


@pytest.mark.parametrize("path", source_files("broker"), ids=lambda p: str(p.relative_to(ROOT)))
def test_broker_modules_import_only_downwards(path):
    assert broker_violations(path) == []


def app_violations(path: Path, root: Path = ROOT) -> list[str]:
    name = module_name(path, root)
    app = name.split(".")[1]
    allowed = APPS_ALLOWED[app] | {f"raftbus.{app}"}
    return [f"{name} imports {target}" for target in imported_modules(path)
            if target == "<relative>" or not any(target == a or target.startswith(a + ".") for a in allowed)]


@pytest.mark.parametrize("path", source_files("client"), ids=lambda p: str(p.relative_to(ROOT)))
def test_client_modules_import_only_downwards(path):
    assert client_violations(path) == []


APP_SOURCES = [p for parts in APP_FOLDERS for p in source_files("/".join(parts))]


@pytest.mark.parametrize("path", APP_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_cli_bench_and_gateway_import_only_what_they_build_on(path):
    assert app_violations(path) == []


def test_importing_the_sdk_loads_neither_the_broker_nor_the_cli_bench_or_gateway():
    """Goal: `import raftbus.client` is the SDK and nothing else (no broker, CLI, benchmarks, gateway or their
    dependencies), in a fresh interpreter."""
    code = ("import sys, raftbus.client\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'uvicorn', 'nats', 'redis', 'pyspark')"
            " or m.split('.')[:2] in (['raftbus', 'broker'], ['raftbus', 'cli'], ['raftbus', 'bench'], ['raftbus', 'gateway']))\n"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("app", sorted(APPS_ALLOWED))
def test_an_app_package_is_not_importable_as_part_of_the_sdk(app):
    """Goal: the CLI, benchmarks and gateway exist under one name only (raftbus.cli, not raftbus.client.cli)."""
    folder = {v: k for k, v in APP_FOLDERS.items()}[app][1]
    with pytest.raises(ImportError):
        importlib.import_module(f"raftbus.client.{folder}")


def test_the_checker_rejects_upward_and_sideways_imports(tmp_path):
    cases = {
        "broker/groups/bad.py": ("from raftbus.broker.log.state import PartitionStateMachine\n", "imports"),
        "broker/storage/bad.py": ("from raftbus.broker.server import Broker\n", "imports"),
        "broker/queues/bad.py": ("from raftbus.client.producer import Producer\n", "imports"),
        "broker/log/rel.py": ("from ..groups import rules\n", "relative"),
    }
    for rel, (text, word) in cases.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        assert any(word in v for v in broker_violations(path, tmp_path)), rel
    client_cases = {
        "client/queues/bad.py": "from raftbus.client.producer import Producer\n",
        "client/router.py": "from raftbus.bench.runner import main\n",
        "client/reader.py": "from raftbus.broker.model import Topic\n",
    }
    for rel, text in client_cases.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        assert client_violations(path, tmp_path), rel

