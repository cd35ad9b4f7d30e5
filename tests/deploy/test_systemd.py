"""Goal: config/deploy/systemd/raftbus@.service is a unit systemd accepts (`systemd-analyze verify` where the
machine has it, with ExecStart pointed at this checkout's console script), and a strict parse of it always:
known sections and keys only, a broker command line the CLI accepts, SIGTERM with a stop timeout longer than
the leadership hand-over, and an environment file example that loads as broker settings once given a secret (no
template under config/deploy carries a usable one)."""
from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from raftbus.broker.settings import load_settings
from raftbus.cli.app import build_parser
from raftbus.cli.app import main as cli_main
from raftbus.client import errors

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "config" / "deploy" / "systemd"
UNIT = SYSTEMD / "raftbus@.service"
KEYS = {  # the keys this unit may use, per section (a misspelled key is silently ignored by systemd)
    "Unit": {"description", "documentation", "wants", "after", "requires"},
    "Service": {"type", "user", "group", "environmentfile", "environment", "execstart", "statedirectory",
                "statedirectorymode", "killsignal", "timeoutstopsec", "restart", "restartsec", "limitnofile",
                "nonewprivileges", "privatetmp", "protectsystem", "protecthome", "readwritepaths"},
    "Install": {"wantedby"},
}


def parse_unit(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True, delimiters=("=",),
                                       comment_prefixes=("#", ";"))
    parser.read_string(text)
    return parser


def check_keys(unit: configparser.ConfigParser) -> None:
    assert set(unit.sections()) == set(KEYS), unit.sections()
    for section in unit.sections():
        unknown = set(unit[section]) - KEYS[section]
        assert not unknown, f"[{section}] has unknown keys {sorted(unknown)}"


def test_unit_parses_with_known_sections_and_keys_only():
    check_keys(parse_unit(UNIT.read_text()))


def test_the_key_check_catches_a_misspelled_key():
    with pytest.raises(AssertionError):
        check_keys(parse_unit(UNIT.read_text().replace("KillSignal=", "KilSignal=")))


def test_execstart_is_a_broker_start_the_cli_accepts_for_an_instance():
    service = parse_unit(UNIT.read_text())["Service"]
    argv = shlex.split(service["ExecStart"].replace("%i", "2"))
    assert argv[0] == "/opt/raftbus/bin/raftbus"
    args = build_parser().parse_args(argv[1:])
    assert (args.command, args.broker_command, args.node_id) == ("broker", "start", 2)
    assert args.data_dir.startswith(service["ReadWritePaths"])
    assert service["KillSignal"] == "SIGTERM"
    settings = load_settings(str(ROOT / "config" / "deploy" / "broker.toml"), cluster_secret="0123456789abcdef" * 4,
                             cluster_id="raftbus-test")  # given by the environment file
    assert int(service["TimeoutStopSec"]) * 1000 > settings.node.shutdown_timeout_ms


def test_the_environment_file_example_loads_as_broker_settings_once_given_a_generated_secret(monkeypatch, capsys):
    """The example's secret is empty: unedited, the broker refuses with what to do; with the secret
    `raftbus secret generate` printed, it loads."""
    for line in (SYSTEMD / "broker.env.example").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            monkeypatch.setenv(name, value)
    assert os.environ["RAFTBUS_CLUSTER_SECRET"] == ""
    with pytest.raises(errors.InvalidArgument, match="cluster_secret is empty.*`raftbus secret generate` makes one"):
        load_settings(str(ROOT / "config" / "deploy" / "broker.toml"), node_id=1)
    assert cli_main(["secret", "generate"]) == 0
    generated = capsys.readouterr().out.strip()
    assert len(generated) == 64 and int(generated, 16) >= 0
    monkeypatch.setenv("RAFTBUS_CLUSTER_SECRET", generated)
    settings = load_settings(str(ROOT / "config" / "deploy" / "broker.toml"), node_id=1)
    node = settings.node
    assert node.peer_addresses[1] == node.raft_address and len(node.peer_addresses) == 3
    assert node.cluster_secret == generated


def systemd_verify(unit_text: str, tmp_path: Path) -> list[str]:
    """What `systemd-analyze verify` says about the unit (instance 1), ExecStart pointed at this checkout's
    console script (verify requires the executable to exist)."""
    script = Path(sys.executable).with_name("raftbus")
    assert script.exists()
    (tmp_path / UNIT.name).write_text(unit_text.replace("/opt/raftbus/bin/raftbus", str(script)))
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", f"./{UNIT.name.replace('@', '@1')}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    complaints = [line for line in (done.stdout + done.stderr).splitlines() if UNIT.name in line]
    return complaints + ([f"exit status {done.returncode}"] if done.returncode else [])


def test_systemd_accepts_the_unit(tmp_path):
    """systemd-analyze verify where installed; elsewhere the strict parse above is the check."""
    if shutil.which("systemd-analyze") is None:
        check_keys(parse_unit(UNIT.read_text()))
        return
    assert systemd_verify(UNIT.read_text(), tmp_path) == []
    broken = tmp_path / "broken"
    broken.mkdir()
    assert systemd_verify(UNIT.read_text().replace("KillSignal=", "KilSignal="), broken)


def test_no_deployment_template_carries_a_usable_cluster_secret():
    """Every place a template sets the cluster secret gives no value (the broker refuses until one is set) or takes
    it from elsewhere (a Kubernetes Secret): a placeholder would let a broker run on a publicly known secret."""
    found = []
    for path in sorted((ROOT / "config" / "deploy").rglob("*")):
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            code = line.split("#", 1)[0]
            for value in re.findall(r"(?i)(?:RAFTBUS_CLUSTER_SECRET|cluster_secret)\s*[=:]\s*(\S*)", code):
                found.append((path.name, number, value.strip("'\"")))
    assert found, "the templates set the secret somewhere"
    assert [f for f in found if f[2] not in ("", "|")] == [], found
