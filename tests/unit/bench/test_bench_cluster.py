"""Goal: the local cluster a benchmark starts takes no fixed port: dev holds client and Raft ports the kernel
picks (--base-port 0), each broker picks its Kafka port, and no metrics endpoint is served, so it starts beside
another cluster on the same machine and nothing takes its ports between the pick and the bind."""
from pathlib import Path

from raftbus.broker import ports as broker_ports
from raftbus.broker.main import build_parser, dev_metrics_ports
from raftbus.bench.runner import DevCluster


def test_a_bench_cluster_asks_the_dev_command_for_held_and_picked_ports_and_no_metrics():
    cluster = DevCluster(3, Path("/tmp/unused"))
    command = cluster.command()
    args = build_parser().parse_args(command[command.index("dev"):])
    assert args.base_port == 0 and args.brokers == 3
    assert dev_metrics_ports(args.brokers, args.metrics_base_port) == [None, None, None]
    ports = broker_ports.dev_broker_ports(args.brokers, args.base_port, args.metrics_base_port, args.kafka_base_port)
    assert [(b.kafka, b.held) for b in ports] == [(0, True)] * 3  # Kafka: each broker picks; client, Raft: held
