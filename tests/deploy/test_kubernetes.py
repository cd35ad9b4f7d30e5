"""Goal: config/deploy/kubernetes/raftbus.yaml is valid against the strict Kubernetes schemas (vendored, no
cluster needed) and hangs together: a headless Service for the StatefulSet, one PVC per broker mounted at the
data dir, readiness on the client port, the credentials Secret mounted where broker.toml names its files, a PodDisruptionBudget keeping a majority, and a broker
command line whose node id, Raft address and peers list agree for every pod."""
from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from raftbus.broker.main import build_parser
from raftbus.broker.settings import load_settings, parse_address, parse_peers

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "config" / "deploy" / "kubernetes" / "raftbus.yaml"
SECRET = "0123456789abcdef" * 4  # what `raftbus secret generate` puts in the Secret
SCHEMAS = json.loads((Path(__file__).with_name("k8s_schemas.json")).read_text())


def documents() -> list[dict]:
    return [doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc]


def one(kind: str, name: str | None = None) -> dict:
    found = [d for d in documents() if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, (kind, name, [d["metadata"]["name"] for d in found])
    return found[0]


def validate(doc: dict) -> None:
    """jsonschema ValidationError unless `doc` matches its kind's strict schema."""
    root = SCHEMAS["kinds"][f"{doc['apiVersion']} {doc['kind']}"]
    schema = {"$schema": SCHEMAS["$schema"], **root, "$defs": SCHEMAS["$defs"]}
    jsonschema.Draft202012Validator(schema).validate(doc)


def container() -> dict:
    (broker,) = one("StatefulSet")["spec"]["template"]["spec"]["containers"]
    return broker


def env_of(broker: dict) -> dict:
    return {e["name"]: e for e in broker["env"]}


def test_every_document_matches_the_strict_schema_of_its_kind():
    kinds = sorted(f"{d['apiVersion']} {d['kind']}" for d in documents())
    assert kinds == ["apps/v1 StatefulSet", "policy/v1 PodDisruptionBudget", "v1 Service", "v1 Service"]
    for doc in documents():
        validate(doc)


@pytest.mark.parametrize("mutate", [
    lambda d: d["spec"].__setitem__("replica", 3),  # misspelled field
    lambda d: d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"].__setitem__("tcpSocket", {"port": []}),
    lambda d: d["spec"].pop("selector"),            # required field
])
def test_the_schema_check_rejects_a_broken_statefulset(mutate):
    broken = copy.deepcopy(one("StatefulSet"))
    mutate(broken)
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)


def test_statefulset_uses_a_headless_service_that_publishes_unready_brokers():
    sts = one("StatefulSet")
    service = one("Service", sts["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    names = {p["name"] for p in container()["ports"]}
    for svc in (service, one("Service", "raftbus")):
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= names


def test_each_broker_gets_its_own_volume_mounted_over_its_data_dir():
    sts = one("StatefulSet")
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    (mount,) = [m for m in container()["volumeMounts"] if m["name"] == claim["metadata"]["name"]]
    argv = broker_argv("raftbus-0", "ns")
    assert Path(argv.data_dir).is_relative_to(mount["mountPath"])


def test_readiness_is_the_client_port_accepting_connections():
    """The kubelet's grpc: probe has no TLS, and the client port speaks TLS only: a TCP probe of that port."""
    broker = container()
    grpc_port = next(p["containerPort"] for p in broker["ports"] if p["name"] == "grpc")
    assert broker["readinessProbe"]["tcpSocket"] == {"port": grpc_port}
    assert broker["livenessProbe"]["tcpSocket"] == {"port": grpc_port}
    assert parse_address(broker_argv("raftbus-0", "ns").listen)[1] == grpc_port


def test_the_credentials_secret_is_mounted_where_the_settings_name_the_files():
    """broker.toml's TLS and token files lie under the read-only mount of the Secret `raftbus certs create` fills."""
    sts = one("StatefulSet")
    (volume,) = [v for v in sts["spec"]["template"]["spec"]["volumes"] if "secret" in v]
    (mount,) = [m for m in container()["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True and volume["secret"]["defaultMode"] & 0o007 == 0
    settings = load_settings(str(ROOT / "config" / "deploy" / "broker.toml"), cluster_secret=SECRET,
                             cluster_id="raftbus-ns")
    s = settings.security
    assert s.auth_enabled and s.tls_cert_file and settings.raft.tls_cert_file
    files = [s.tls_cert_file, s.tls_key_file, s.tls_ca_file, s.auth_bootstrap_token_file, settings.raft.tls_cert_file,
             settings.raft.tls_key_file, settings.raft.tls_ca_file,
             env_of(container())["RAFTBUS_METRICS_TOKEN_FILE"]["value"]]
    assert all(Path(f).is_relative_to(mount["mountPath"]) for f in files), files


def test_disruption_budget_keeps_a_majority_of_brokers():
    pdb = one("PodDisruptionBudget")
    sts = one("StatefulSet")
    replicas = sts["spec"]["replicas"]
    assert pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    assert replicas - pdb["spec"]["maxUnavailable"] > replicas // 2


def expand_env_references(text: str, values: dict) -> str:
    """Kubernetes' $(VAR) expansion in env values."""
    return re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], text)


def broker_argv(pod: str, namespace: str):
    """The broker's parsed command line in pod `pod`, from running the container's shell command."""
    broker = container()
    assert broker["command"] == ["/bin/sh", "-c"]
    (script,) = broker["args"]
    assert script.startswith("exec raftbus broker start ")
    echo = script.replace("exec raftbus ", "exec printf '%s\\n' ", 1)
    out = subprocess.run(["/bin/sh", "-c", echo], env={"HOSTNAME": pod, "POD_NAMESPACE": namespace},
                         capture_output=True, text=True, check=True).stdout
    argv = out.splitlines()
    assert argv[:2] == ["broker", "start"], argv
    return build_parser().parse_args(argv[1:])


@pytest.mark.parametrize("ordinal", [0, 1, 2])
def test_every_pod_starts_a_broker_whose_settings_agree_with_the_peers_list(ordinal):
    pod, namespace = f"raftbus-{ordinal}", "queues"
    args = broker_argv(pod, namespace)
    env = env_of(container())
    assert env["RAFTBUS_CLUSTER_SECRET"]["valueFrom"]["secretKeyRef"]["key"]
    assert env["RAFTBUS_CLUSTER_ID"]["value"].startswith("raftbus-")
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    peers = expand_env_references(env["RAFTBUS_PEERS"]["value"], {"POD_NAMESPACE": namespace})
    cluster_id = expand_env_references(env["RAFTBUS_CLUSTER_ID"]["value"], {"POD_NAMESPACE": namespace})
    service = one("StatefulSet")["spec"]["serviceName"]
    assert parse_peers(peers) == {i + 1: (f"raftbus-{i}.{service}.{namespace}.svc.cluster.local", 7071)
                                  for i in range(one("StatefulSet")["spec"]["replicas"])}
    config = ROOT / "config" / "deploy" / "broker.toml"
    assert args.config == "/etc/raftbus/broker.toml"
    settings = load_settings(str(config), node_id=args.node_id, data_dir=args.data_dir, listen=args.listen,
                             advertised_listen=args.advertised_listen, raft_listen=args.raft_listen, peers=peers,
                             metrics_listen=args.metrics_listen, cluster_id=cluster_id, cluster_secret=SECRET,
                             metrics_token_file=env["RAFTBUS_METRICS_TOKEN_FILE"]["value"])  # validate(): peers[node_id] == raft_listen, a real secret
    assert settings.node.node_id == ordinal + 1
    assert settings.node.client_address == f"{pod}.{service}.{namespace}.svc.cluster.local:7070"
    metrics_port = next(p["containerPort"] for p in container()["ports"] if p["name"] == "metrics")
    assert parse_address(settings.metrics.metrics_listen)[1] == metrics_port
