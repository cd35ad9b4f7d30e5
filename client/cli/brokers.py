"""`raftbus brokers drain ID [--no-wait]` and `raftbus brokers undrain ID`: move leaderships off a broker before
maintenance (a rolling restart: drain, stop, start, undrain; see docs/operations.md)."""
from __future__ import annotations

import argparse
import json
import sys

from raftbus.client.admin import Admin, BrokerDescription
from raftbus.cli.movement import add_decommission_command


def add_broker_admin_commands(sub, common: argparse.ArgumentParser, bootstrap_of) -> None:
    brokers = sub.add_parser("brokers", help="drain, undrain or decommission a broker")
    actions = brokers.add_subparsers(dest="brokers_command", required=True)
    drain = actions.add_parser("drain", parents=[common],
                               help="hand every leadership away and take none until undrained")
    drain.add_argument("broker_id", type=int)
    drain.add_argument("--no-wait", dest="wait", action="store_false", help="return once the broker is marked")
    drain.add_argument("--timeout-s", type=float, default=60.0, help="how long --wait waits (default 60)")
    drain.set_defaults(handler=lambda args: run_drain(args, bootstrap_of(args)))
    undrain = actions.add_parser("undrain", parents=[common], help="let a drained broker lead again")
    undrain.add_argument("broker_id", type=int)
    undrain.set_defaults(handler=lambda args: run_undrain(args, bootstrap_of(args)))
    add_decommission_command(actions, common, bootstrap_of)


def print_broker(broker: BrokerDescription, as_json: bool) -> None:
    if as_json:
        print(json.dumps(broker.to_dict()))
    else:
        print(f"broker {broker.broker_id} {broker.state} ({broker.address})")


def run_drain(args, bootstrap: str) -> int:
    def progress(left: int) -> None:
        print(f"broker {args.broker_id}: {left} leadership(s) left", file=sys.stderr, flush=True)

    with Admin(bootstrap) as admin:
        broker = admin.drain_broker(args.broker_id, wait=args.wait, timeout_s=args.timeout_s,
                                    progress=progress if args.wait else None)
    print_broker(broker, args.json)
    return 0


def run_undrain(args, bootstrap: str) -> int:
    with Admin(bootstrap) as admin:
        print_broker(admin.undrain_broker(args.broker_id), args.json)
    return 0
