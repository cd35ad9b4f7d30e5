"""Maps the repository's top-level folders onto the `raftbus` namespace.

`broker/` is installed as `raftbus.broker` and `config/` (the settings files) as `raftbus.config`. `client/` holds
the SDK, `raftbus.client`, and beside it three packages of their own that are not the SDK: the `raftbus` command
(`client/cli` → `raftbus.cli`), the benchmarks (`client/bench` → `raftbus.bench`) and the HTTP gateway
(`client/gateway` → `raftbus.gateway`). No bare top-level name owned by another package is taken.
"""
from pathlib import Path

from setuptools import setup

# folder -> package; a folder listed here is its own package even inside another one's folder
ROOTS = {
    "broker": "raftbus.broker",
    "client": "raftbus.client",
    "client/cli": "raftbus.cli",
    "client/bench": "raftbus.bench",
    "client/gateway": "raftbus.gateway",
    "config": "raftbus.config",
}


def _owner(folder: Path) -> str:
    """The ROOTS folder a package folder belongs to: the longest one containing it."""
    return max((root for root in ROOTS if folder == Path(root) or Path(root) in folder.parents), key=len)


def _packages():
    package_dir, packages = {}, []
    for root, name in ROOTS.items():
        for init in sorted(Path(root).rglob("__init__.py")):
            if _owner(init.parent) != root:
                continue
            dotted = ".".join((name, *init.parent.relative_to(root).parts))
            packages.append(dotted)
            package_dir[dotted] = str(init.parent)
    return packages, package_dir


packages, package_dir = _packages()
setup(packages=packages, package_dir=package_dir,
      package_data={"raftbus.config": ["*.toml"], "raftbus.broker.raft.pysyncobj": ["LICENSE"],
                    "raftbus.gateway": ["static/*"]})
