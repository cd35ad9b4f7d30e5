"""Maps the repository's top-level folders onto the `raftbus` namespace.

`broker/` is installed as `raftbus.broker`, `client/` as `raftbus.client` and `config/` (the settings
files) as `raftbus.config`, so no bare top-level name owned by another package is taken.
"""
from pathlib import Path

from setuptools import setup

ROOTS = {"broker": "raftbus.broker", "client": "raftbus.client", "config": "raftbus.config"}


def _packages():
    package_dir, packages = {}, []
    for folder, name in ROOTS.items():
        for init in sorted(Path(folder).rglob("__init__.py")):
            rel = init.parent.relative_to(folder).parts
            dotted = ".".join((name, *rel))
            packages.append(dotted)
            package_dir[dotted] = str(init.parent)
    return packages, package_dir


packages, package_dir = _packages()
setup(packages=packages, package_dir=package_dir, package_data={"raftbus.config": ["*.toml"], "raftbus.broker.raft.pysyncobj": ["LICENSE"], "raftbus.client.http": ["static/*", "static/swagger/*"]})
