"""Goal: config/deploy/Dockerfile parses, copies only paths that exist, installs a wheel that builds from
exactly what it copies, and runs the `raftbus` console script with a command line and settings file the broker
accepts, as a non-root user, exposing the ports those settings use."""
from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from raftbus.broker.settings import load_settings, parse_address
from raftbus.cli.app import build_parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "config" / "deploy"
INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER",
                "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}


def parse_dockerfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, backslash continuations joined."""
    instructions, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        if word.upper() not in INSTRUCTIONS:
            raise ValueError(f"unknown Dockerfile instruction {word!r}")
        instructions.append((word.upper(), rest.strip()))
    if pending:
        raise ValueError("Dockerfile ends inside a continued line")
    return instructions


def exec_form(arguments: str) -> list[str]:
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), arguments
    return value


INSTRUCTIONS_OF = parse_dockerfile((DEPLOY / "Dockerfile").read_text())


def of(name: str) -> list[str]:
    return [args for instruction, args in INSTRUCTIONS_OF if instruction == name]


def copies() -> list[tuple[list[str], str]]:
    result = []
    for args in of("COPY"):
        parts = shlex.split(args)
        assert not any(p.startswith("--") for p in parts), "COPY flags are not expected"
        result.append((parts[:-1], parts[-1]))
    return result


def test_the_parser_rejects_broken_dockerfiles():
    with pytest.raises(ValueError):
        parse_dockerfile("FROM python:3.12-slim\nCOPYY a b\n")
    with pytest.raises(ValueError):
        parse_dockerfile("FROM python:3.12-slim\nRUN true \\\n")
    assert parse_dockerfile("# c\nFROM x:1\nRUN a \\\n  && b\n") == [("FROM", "x:1"), ("RUN", "a && b")]


def test_base_image_is_pinned_and_the_broker_runs_unprivileged():
    assert INSTRUCTIONS_OF[0][0] == "FROM"
    image = INSTRUCTIONS_OF[0][1]
    assert ":" in image and not image.endswith(":latest")
    (user,) = of("USER")
    assert user.split(":")[0] not in ("root", "0")


def test_every_copied_path_exists_in_the_build_context():
    for sources, destination in copies():
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such path in the repository"
        assert destination.startswith(("/", "./")), destination


def test_the_copied_tree_builds_a_wheel_with_the_broker_client_and_settings(tmp_path):
    context = tmp_path / "context"
    for sources, destination in copies():
        if destination.startswith("/"):
            continue  # files placed outside the source tree
        for source in sources:
            target = context / destination / Path(source).name if destination.endswith("/") else context / destination
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / source, target)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(context)], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("raftbus-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"raftbus/broker/main.py", "raftbus/broker/metrics/exporter.py", "raftbus/cli/app.py",
            "raftbus/bench/runner.py", "raftbus/gateway/app.py", "raftbus/gateway/static/dashboard.js",
            "raftbus/config/defaults.toml", "raftbus/client/wire/raftbus_pb2.py"} <= names
    # the SDK's package holds the SDK only: the CLI, benchmarks and gateway are packages of their own
    assert not [n for n in names if n.startswith(("raftbus/client/cli/", "raftbus/client/bench/",
                                                   "raftbus/client/gateway/"))]


def test_the_entrypoint_is_the_console_script_and_the_command_is_a_broker_start():
    (entrypoint,) = of("ENTRYPOINT")
    (cmd,) = of("CMD")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert exec_form(entrypoint) == ["raftbus"] and "raftbus" in scripts
    args = build_parser().parse_args(exec_form(cmd))
    assert (args.command, args.broker_command) == ("broker", "start")
    (config_dest,) = [dest for sources, dest in copies() if sources == ["config/deploy/broker.toml"]]
    assert args.config == config_dest


def test_exposed_ports_are_the_ones_the_image_settings_listen_on():
    settings = load_settings(str(DEPLOY / "broker.toml"), cluster_secret="0123456789abcdef" * 4,
                             cluster_id="raftbus-test")  # given by the environment of a deployed broker
    exposed = {int(p) for args in of("EXPOSE") for p in args.split()}
    assert exposed == {parse_address(settings.node.listen)[1], parse_address(settings.node.raft_listen)[1],
                       parse_address(settings.metrics.metrics_listen)[1]}
    (volume,) = of("VOLUME")
    assert Path(settings.node.data_dir).is_relative_to(exec_form(volume)[0])


def test_the_build_context_leaves_out_local_state():
    ignored = {line.strip() for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()}
    assert {".git", ".venv", "data"} <= ignored
