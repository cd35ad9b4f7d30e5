"""Goal: every deployment template (the container image, the Kubernetes StatefulSet, the systemd unit) starts a
real broker from its own settings with TLS and auth on, using the files `raftbus certs create` makes: the admin
token from it is the first admin, a caller without a token or without TLS is refused, and /metrics answers only
where the template says (with its token when it listens beyond loopback). Paths under /etc/raftbus and
/var/lib/raftbus are rewritten into a temporary directory and addresses to loopback ports; everything else is the
template's."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from raftbus.cli.app import main as cli_main
from raftbus.client import Admin, Producer, Reader, errors
from tests.deploy import test_dockerfile, test_kubernetes, test_systemd
from tests.helpers import wait_until
from tests.ports import REUSE_PORT_ENV, reserve_ports

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "config" / "deploy"
ETC, VAR = "/etc/raftbus", "/var/lib/raftbus"


def container_template() -> tuple[list[str], dict]:
    """The image's CMD, with the per-broker flags of the `docker run` in docs/operations.md."""
    (cmd,) = test_dockerfile.of("CMD")
    return test_dockerfile.exec_form(cmd), {}


def kubernetes_template() -> tuple[list[str], dict]:
    """Pod raftbus-0's command line (run through sh) and its plain environment values."""
    broker = test_kubernetes.container()
    (script,) = broker["args"]
    echo = script.replace("exec raftbus ", "exec printf '%s\\n' ", 1)
    argv = subprocess.run(["/bin/sh", "-c", echo], env={"HOSTNAME": "raftbus-0", "POD_NAMESPACE": "default"},
                          capture_output=True, text=True, check=True).stdout.splitlines()
    env = {e["name"]: e["value"] for e in broker["env"] if "value" in e and e["name"].startswith("RAFTBUS_")}
    return argv, env


def systemd_template() -> tuple[list[str], dict]:
    """Instance 1's ExecStart and the example environment file."""
    service = test_systemd.parse_unit(test_systemd.UNIT.read_text())["Service"]
    argv = shlex.split(service["ExecStart"].replace("%i", "1"))[1:]
    env = {}
    for line in (test_systemd.SYSTEMD / "broker.env.example").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            env[name] = value
    return argv, env


TEMPLATES = {"container": container_template, "kubernetes": kubernetes_template, "systemd": systemd_template}


def rewritten(text: str, root: Path) -> str:
    return text.replace(ETC, str(root / "etc")).replace(VAR, str(root / "var"))


class TemplateBroker:
    """A broker process started from a template's command line and environment, paths and addresses rewritten."""

    def __init__(self, root: Path, argv: list[str], env: dict):
        self.root = root
        (root / "etc").mkdir()
        (root / "etc" / "broker.toml").write_text(rewritten((DEPLOY / "broker.toml").read_text(), root))
        assert cli_main(["certs", "create", str(root / "etc" / "credentials"), "--host", "localhost",
                         "--host", "127.0.0.1", "--json"]) == 0
        self.credentials = root / "etc" / "credentials"
        self.ports = reserve_ports(2)  # held until stop(); the broker binds beside them (tests/ports.py)
        grpc_port, raft_port = self.ports.ports
        self.address = f"127.0.0.1:{grpc_port}"
        self.metrics_port = None  # the broker binds port 0 and names the port on its ready line
        metrics_host = "0.0.0.0" if "0.0.0.0:9570" in argv else "127.0.0.1"  # the template's choice, kept
        loopback = {"--listen": self.address, "--advertised-listen": self.address,
                    "--raft-listen": f"127.0.0.1:{raft_port}", "--peers": f"1@127.0.0.1:{raft_port}",
                    "--node-id": "1"}
        self.argv = [rewritten(a, root) for a in argv]
        for flag, value in loopback.items():
            self.argv += [flag, value]
        self.env = {**os.environ, **{k: rewritten(v, root) for k, v in env.items()},
                    "RAFTBUS_PEERS": f"1@127.0.0.1:{raft_port}", "RAFTBUS_RAFT_LISTEN": f"127.0.0.1:{raft_port}",
                    "RAFTBUS_ADVERTISED_LISTEN": self.address,
                    "RAFTBUS_METRICS_LISTEN": f"{metrics_host}:0", **REUSE_PORT_ENV,
                    "RAFTBUS_CLUSTER_SECRET": "0123456789abcdef" * 4, "RAFTBUS_CLUSTER_ID": "template-test"}
        self.env.pop("RAFTBUS_TLS_CA", None)
        self.env.pop("RAFTBUS_TOKEN_FILE", None)
        self.metrics_beyond_loopback = metrics_host == "0.0.0.0"
        self.proc = None

    def start(self) -> "TemplateBroker":
        argv = [a for a in self.argv]
        if "--metrics-listen" in argv:  # the template's port is replaced, its host kept (above)
            index = argv.index("--metrics-listen")
            del argv[index:index + 2]
        data_dir = self.root / "var" / "data"
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "raftbus.broker", *argv[1:], "--log-level", "WARNING"] \
            if argv[0] == "broker" else None
        assert command is not None and argv[:2] == ["broker", "start"], argv
        log = open(self.root / "broker.log", "ab")
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, env=self.env)
        log.close()
        line = self.proc.stdout.readline()
        assert line, (self.root / "broker.log").read_text()
        ready = json.loads(line)
        assert ready["event"] == "ready"
        self.metrics_port = ready["metrics_port"]
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        self.ports.close()

    def scrape(self, token: str | None) -> int:
        request = urllib.request.Request(f"http://127.0.0.1:{self.metrics_port}/metrics")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status
        except urllib.error.HTTPError as refused:
            return refused.code


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_a_broker_started_from_the_template_is_secure_and_serves_its_admin(tmp_path, template):
    argv, env = TEMPLATES[template]()
    broker = TemplateBroker(tmp_path, argv, env)
    try:
        broker.start()
        ca = str(broker.credentials / "ca.pem")
        admin_token = (broker.credentials / "admin.token").read_text().strip()
        with Admin(broker.address, tls_ca=ca, token=admin_token) as admin:
            wait_until(lambda: admin.whoami() == {"principal": "admin", "auth_enabled": True}, 60, 0.2, what="the bootstrap token's admin")
            admin.create_topic("templated", partitions=1, replication_factor=1)
        with Producer(broker.address, tls_ca=ca, token=admin_token) as producer:
            assert producer.send("templated", b"secure", partition=0).result(30).offset == 0
        with Reader(broker.address, tls_ca=ca, token=admin_token) as reader:
            assert [r.value for r in reader.iter_partition("templated", 0, stop_at_end=True)] == [b"secure"]
        with Admin(broker.address, tls_ca=ca) as anonymous:
            with pytest.raises(errors.Unauthenticated):
                anonymous.list_topics()
        with Admin(broker.address, connect_timeout_ms=2000) as plaintext:
            with pytest.raises(errors.RaftbusError) as refused:
                plaintext.list_topics()
            assert refused.value.code == "TLS_MISMATCH"
        metrics_token = (broker.credentials / "metrics.token").read_text().strip()
        if broker.metrics_beyond_loopback:
            assert broker.scrape(None) == 401 and broker.scrape("wrong") == 401
            assert broker.scrape(metrics_token) == 200
        else:
            assert broker.scrape(None) == 200
    finally:
        broker.stop()
