"""`raftbus consume TOPIC --group G` and `raftbus groups list|describe G|reset-offsets G`."""
from __future__ import annotations

import argparse
import json
import time

from raftbus.client import settings
from raftbus.client.admin import Admin
from raftbus.client.consumer import EARLIEST, LATEST, Consumer
from raftbus.client.groups.admin import GroupDescription


def add_group_commands(sub, common: argparse.ArgumentParser, handlers) -> None:
    """`groups list` and `groups describe G`; `handlers` maps each action to its run function."""
    groups = sub.add_parser("groups", help="list and describe consumer groups")
    actions = groups.add_subparsers(dest="groups_command", required=True)
    actions.add_parser("list", parents=[common], help="every group, its state and members") \
        .set_defaults(handler=handlers["list"])
    describe = actions.add_parser("describe", parents=[common],
                                  help="members, assignment, committed offsets and lag of a group")
    describe.add_argument("name")
    describe.set_defaults(handler=handlers["describe"])
    reset = actions.add_parser("reset-offsets", parents=[common],
                               help="set a group's committed offsets on a topic (the group must have no members; "
                                    "a group that does not exist is created)")
    reset.add_argument("name")
    reset.add_argument("--topic", required=True)
    reset.add_argument("--partitions", type=partition_list, help="comma-separated partitions (default: all)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="each partition's log start")
    target.add_argument("--to-latest", action="store_true", help="each partition's high watermark")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N, clamped to each partition's log")
    target.add_argument("--to-time", type=int, metavar="MS", help="the first offset at or after MS (ms since epoch)")
    reset.add_argument("--dry-run", action="store_true", help="print the offsets without setting them")
    reset.set_defaults(handler=handlers["reset-offsets"])


def partition_list(text: str) -> list[int]:
    try:
        partitions = [int(part) for part in text.split(",")]
    except ValueError:
        partitions = []
    if not partitions or any(p < 0 for p in partitions):
        raise argparse.ArgumentTypeError(f"partitions must be comma-separated integers >= 0, not {text!r}")
    return partitions


def check_group_usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.command == "consume" and args.group is not None and (args.partition is not None or args.offset):
        parser.error("consume: --group reads the partitions the group assigns; drop --partition/--offset")


def tps(values) -> str:
    return ",".join(f"{t}/{p}" for t, p in values) or "-"


def print_groups(groups: list[GroupDescription], print_table) -> None:
    print_table(["GROUP", "STATE", "GENERATION", "MEMBERS", "TOPICS"],
                [[g.name, g.state, g.generation, len(g.members), ",".join(g.topics) or "-"] for g in groups])


def print_group(group: GroupDescription, print_table) -> None:
    print(f"group {group.name} state={group.state} generation={group.generation} "
          f"topics={','.join(group.topics) or '-'} lag_records={group.lag_records}")
    print_table(["MEMBER", "CLIENT", "OWNED", "PENDING"],
                [[m.member_id, m.client_id or "-", tps(m.owned), tps(sorted(set(m.target) - set(m.owned)))]
                 for m in group.members])
    print()
    print_table(["TOPIC", "PARTITION", "OWNER", "COMMITTED", "LOG_START", "HIGH_WATERMARK", "LAG", "LAG_S"],
                [[p.topic, p.partition, p.owner or "-", _or_dash(p.committed_offset), p.log_start_offset,
                  p.high_watermark, _or_dash(p.lag_records), _or_dash(p.lag_s)] for p in group.partitions])


def _or_dash(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def run_groups_list(args, bootstrap: str, print_table) -> int:
    with Admin(bootstrap) as admin:
        groups = admin.list_groups()
    if args.json:
        print(json.dumps([g.to_dict() for g in groups]))
    else:
        print_groups(groups, print_table)
    return 0


def run_groups_describe(args, bootstrap: str, print_table) -> int:
    with Admin(bootstrap) as admin:
        group = admin.describe_group(args.name)
    if args.json:
        print(json.dumps(group.to_dict()))
    else:
        print_group(group, print_table)
    return 0


def run_groups_reset_offsets(args, bootstrap: str, print_table) -> int:
    with Admin(bootstrap) as admin:
        plan = admin.reset_group_offsets(args.name, args.topic, to_earliest=args.to_earliest,
                                         to_latest=args.to_latest, to_offset=args.to_offset,
                                         to_time_ms=args.to_time, partitions=args.partitions, dry_run=args.dry_run)
    rows = [{"topic": args.topic, "partition": p, "offset": o} for p, o in sorted(plan.items())]
    if args.json:
        print(json.dumps({"group": args.name, "dry_run": args.dry_run, "offsets": rows}))
    else:
        print_table(["TOPIC", "PARTITION", "NEW_OFFSET"], [[r["topic"], r["partition"], r["offset"]] for r in rows])
        if args.dry_run:
            print("(dry run: nothing was changed)")
    return 0


def run_consume_group(args, bootstrap: str, record_line) -> int:
    """Print records as a group member; commit exactly what was printed after each poll; leave on exit."""
    reset = EARLIEST if args.from_beginning else LATEST
    left = args.max
    idle_s = None if args.timeout_ms is None else args.timeout_ms / 1000
    last_record_s = time.monotonic()
    with Consumer(bootstrap, group=args.group, topics=[args.topic], auto_offset_reset=reset,
                  enable_auto_commit=False, client_id="raftbus-cli") as consumer:
        while left is None or left > 0:
            records = consumer.poll(settings.POLL_TIMEOUT_MS / 1000, max_records=left)
            printed = {}
            for record in records:
                print(record_line(record, args.json), flush=True)
                printed[(record.topic, record.partition)] = record.offset + 1
            if printed:
                consumer.commit(printed)
                last_record_s = time.monotonic()
                left = None if left is None else left - len(records)
            elif idle_s is not None and time.monotonic() - last_record_s >= idle_s:
                break
    return 0
