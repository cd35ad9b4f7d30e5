"""Goal: the reassign and decommission commands parse their arguments, refuse bad replica lists before calling
the cluster, and count progress steps as documented."""
import argparse

import pytest

from raftbus.cli import app as cli
from raftbus.cli.movement import replica_list, reassign_progress
from raftbus.client.errors import InvalidReplicas
from raftbus.client.cluster_admin import Reassignment, check_replicas


def test_arguments_parse():
    args = cli.build_parser().parse_args(["partitions", "reassign", "orders", "2", "--replicas", "2,3,4", "--wait",
                                          "--throttle-bytes-per-s", "1000"])
    assert (args.topic, args.partition, args.replicas, args.wait, args.throttle_bytes_per_s) == (
        "orders", 2, [2, 3, 4], True, 1000)
    args = cli.build_parser().parse_args(["brokers", "decommission", "3"])
    assert (args.broker_id, args.wait) == (3, False)
    with pytest.raises(argparse.ArgumentTypeError):
        replica_list("2,x")


@pytest.mark.parametrize("replicas", [[], [1, 1, 2]])
def test_bad_replica_lists_are_refused_in_the_client(replicas):
    with pytest.raises(InvalidReplicas):
        check_replicas(replicas)


def state(replicas, target, voters, learners):
    return Reassignment("t", 0, replicas, target, voters, learners, 0, not target)


def test_progress_counts_add_promote_remove_and_record():
    original = (1, 2, 3)
    assert reassign_progress(state(original, (2, 3, 4), (1, 2, 3), ()), original) == (0, 4)
    assert reassign_progress(state(original, (2, 3, 4), (1, 2, 3), (4,)), original) == (1, 4)
    assert reassign_progress(state(original, (2, 3, 4), (1, 2, 3, 4), ()), original) == (2, 4)
    assert reassign_progress(state(original, (2, 3, 4), (2, 3, 4), ()), original) == (3, 4)
    assert reassign_progress(state((2, 3, 4), (), (), ()), original) == (4, 4)
