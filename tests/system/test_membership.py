"""System tests of cluster membership through real broker processes: a broker joins a running cluster."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from raftbus.client import Admin, Producer
from tests.helpers import BrokerProcess, free_ports, wait_until
from tests.system.conftest import running_cluster

pytestmark = pytest.mark.system


def cli_json(*argv: str) -> dict:
    command = [sys.executable, "-c", "from raftbus.client.cli import main; raise SystemExit(main())", *argv, "--json"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def joining_broker(root, node_id: int, join: str) -> BrokerProcess:
    grpc_port, raft_port = free_ports(2)
    broker = BrokerProcess(node_id, grpc_port, raft_port, root / f"broker-{node_id}", peers="", join=join)
    broker.data_dir.mkdir(parents=True, exist_ok=True)
    return broker


def test_a_fourth_broker_joins_and_votes(tmp_path):
    """A broker started with --join (no peers) is added as a learner, promoted to voter, and its acknowledgement
    is then needed: with one original broker stopped, the metadata group commits only through it. It stays a
    voter across a restart, and `raftbus cluster status --json` lists it."""
    with running_cluster(tmp_path) as cluster:
        fourth = joining_broker(tmp_path, 4, cluster.broker(1).address)
        try:
            fourth.start()
            with Admin(cluster.bootstrap) as admin:
                members = wait_until(lambda: 4 in admin.metadata_members().voters and admin.metadata_members(),
                                     60, 0.2, what="broker 4 promoted to voter")
                assert members.voters == (1, 2, 3, 4) and members.learners == ()
                wait_until(lambda: any(b.broker_id == 4 and b.alive for b in admin.cluster_status().brokers),
                           30, 0.2, what="broker 4 registered and alive")
            status = cli_json("cluster", "status", "--bootstrap", cluster.bootstrap)
            assert status["metadata_voters"] == [1, 2, 3, 4] and status["metadata_learners"] == []

            fourth.terminate()
            fourth.start()  # a restart: no peers, no second join; it comes back from its own data
            cluster.broker(1).terminate()  # 3 of 4 voters left: every commit needs broker 4
            bootstrap = ",".join(b.address for b in (cluster.broker(2), cluster.broker(3), fourth))
            with Admin(bootstrap) as admin:
                wait_until(lambda: admin.cluster_status().controller_id in (2, 3, 4), 60, 0.2,
                           what="a controller among the remaining voters")
                admin.create_topic("joined", partitions=2, replication_factor=3)
                with Producer(bootstrap) as producer:
                    offsets = [producer.send("joined", b"v%d" % i, partition=0).result(30).offset for i in range(5)]
                assert offsets == list(range(5))
                assert admin.metadata_members().voters == (1, 2, 3, 4)
        finally:
            fourth.kill()
