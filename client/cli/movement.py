"""`raftbus partitions reassign TOPIC PARTITION --replicas 2,3,4 [--wait] [--throttle-bytes-per-s N]` and
`raftbus brokers decommission ID [--wait]`: move data between brokers (docs/operations.md), with a tqdm progress
bar on a terminal while waiting."""
from __future__ import annotations

import argparse
import json

from raftbus.cli.progress import ProgressBar

from raftbus.client.admin import Admin
from raftbus.client.errors import InvalidReplicas
from raftbus.client.cluster_admin import Decommission, Reassignment


def replica_list(text: str) -> list[int]:
    try:
        return [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--replicas takes broker ids like 2,3,4, not {text!r}") from None


def add_reassign_command(actions, common: argparse.ArgumentParser, bootstrap_of) -> None:
    reassign = actions.add_parser("reassign", parents=[common], help="move one partition's replicas")
    reassign.add_argument("topic")
    reassign.add_argument("partition", type=int)
    reassign.add_argument("--replicas", type=replica_list, required=True,
                          help="broker ids, the first becomes the preferred leader (e.g. 2,3,4)")
    reassign.add_argument("--throttle-bytes-per-s", type=int, default=0,
                          help="catch-up bytes/s sent to new replicas (0 = the brokers' reassign_throttle_bytes_per_s)")
    reassign.add_argument("--wait", action="store_true", help="show progress until the partition has moved")
    reassign.add_argument("--timeout-s", type=float, default=600.0, help="how long --wait waits (default 600)")
    reassign.set_defaults(handler=lambda args: run_reassign(args, bootstrap_of(args)))


def add_decommission_command(actions, common: argparse.ArgumentParser, bootstrap_of) -> None:
    decommission = actions.add_parser("decommission", parents=[common],
                                      help="move every replica off a broker and take it out of the metadata voters")
    decommission.add_argument("broker_id", type=int)
    decommission.add_argument("--wait", action="store_true", help="show progress until the broker is empty")
    decommission.add_argument("--timeout-s", type=float, default=1800.0, help="how long --wait waits (default 1800)")
    decommission.set_defaults(handler=lambda args: run_decommission(args, bootstrap_of(args)))


def reassign_progress(state: Reassignment, original: tuple[int, ...]) -> tuple[int, int]:
    """(steps done, steps in all): each new replica is added then promoted, each old one removed, then recorded."""
    new, old = set(state.target or state.replicas) - set(original), set(original) - set(state.target or state.replicas)
    total = 2 * len(new) + len(old) + 1
    if state.done:
        return total, total
    voters, learners = set(state.voters), set(state.learners)
    done = len(new & learners) + 2 * len(new & voters)
    if voters:
        done += len(old - voters - learners)
    return min(done, total - 1), total


def run_reassign(args, bootstrap: str) -> int:
    if len(set(args.replicas)) != len(args.replicas) or not args.replicas:
        raise InvalidReplicas(f"--replicas {args.replicas} is empty or names a broker twice")
    bar = ProgressBar(f"{args.topic}/{args.partition}", "step")
    with Admin(bootstrap) as admin:
        original = admin.describe_reassignment(args.topic, args.partition).replicas

        def progress(state: Reassignment) -> None:
            done, total = reassign_progress(state, original)
            lag = f"learners lag {state.lag_entries} entries" if state.learners else "moving"
            bar.show(done, total, "done" if state.done else lag)

        try:
            state = admin.reassign_partition(args.topic, args.partition, args.replicas,
                                             throttle_bytes_per_s=args.throttle_bytes_per_s, wait=args.wait,
                                             timeout_s=args.timeout_s, progress=progress if args.wait else None)
        finally:
            bar.close()
    print(json.dumps(state.to_dict()) if args.json else
          f"{state.topic}/{state.partition}: replicas {list(state.replicas)}"
          + ("" if state.done else f" moving to {list(state.target)}"))
    return 0


def run_decommission(args, bootstrap: str) -> int:
    bar = ProgressBar(f"broker {args.broker_id}", "step")
    first: list[Decommission] = []

    def progress(state: Decommission) -> None:
        first.append(state) if not first else None
        total = first[0].replicas_left + 1
        left = state.replicas_left + (1 if state.metadata_voter else 0)
        bar.show(total - min(left, total), total,
                 f"{state.replicas_left} replicas left, {state.reassignments_running} moving")

    with Admin(bootstrap) as admin:
        try:
            state = admin.decommission_broker(args.broker_id, wait=args.wait, timeout_s=args.timeout_s,
                                              progress=progress if args.wait else None)
        finally:
            bar.close()
    print(json.dumps(state.to_dict()) if args.json else
          f"broker {state.broker_id}: {state.replicas_left} replicas left"
          + (", out of the metadata voters" if not state.metadata_voter else "") + (" (done)" if state.done else ""))
    return 0
