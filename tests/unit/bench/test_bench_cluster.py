"""Goal: the local cluster a benchmark starts serves no metrics endpoints, whose ports are fixed, so it starts
beside another cluster on the same machine (each benchmark picks free client and Raft ports of its own)."""
from pathlib import Path

from raftbus.broker.main import build_parser, dev_metrics_ports
from raftbus.bench.runner import DevCluster


def test_a_bench_cluster_asks_the_dev_command_for_no_metrics_ports():
    cluster = DevCluster(3, Path("/tmp/unused"))
    command = cluster.command()
    args = build_parser().parse_args(command[command.index("dev"):])
    assert args.base_port == cluster.base_port and args.brokers == 3
    assert dev_metrics_ports(args.brokers, args.metrics_base_port) == [None, None, None]
