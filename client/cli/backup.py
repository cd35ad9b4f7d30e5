"""`raftbus backup create DIR [--incremental]`, `backup verify DIR` and `backup restore DIR --bootstrap OTHER`
(progress bars on standard error when it is a terminal)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from raftbus.cli.progress import ProgressBar

from raftbus.client.backup import create_backup, restore_backup, verify_backup


def add_backup_commands(sub, common: argparse.ArgumentParser, bootstrap_of) -> None:
    backup = sub.add_parser("backup", help="back up every topic, verify a backup, restore it into a cluster")
    actions = backup.add_subparsers(dest="backup_command", required=True)
    create = actions.add_parser("create", parents=[common], help="an online backup of every topic into DIR")
    create.add_argument("dir", type=Path)
    create.add_argument("--incremental", action="store_true", help="only what changed since DIR's last backup")
    create.set_defaults(handler=lambda args: run_create(args, bootstrap_of(args)))
    verify = actions.add_parser("verify", parents=[common], help="check every backup in DIR against its checksums")
    verify.add_argument("dir", type=Path)
    verify.set_defaults(handler=run_verify)
    restore = actions.add_parser("restore", parents=[common],
                                 help="recreate DIR's topics in the cluster named by --bootstrap")
    restore.add_argument("dir", type=Path)
    restore.set_defaults(handler=lambda args: run_restore(args, bootstrap_of(args)))


class Bar(ProgressBar):
    """A bar over partitions, told each partition as it is done."""

    def __init__(self, what: str):
        super().__init__(what, "partition")

    def __call__(self, item: str, done: int, total: int) -> None:
        self.show(done, total, item)


def run_create(args, bootstrap: str) -> int:
    bar = Bar("backup")
    try:
        manifest = create_backup(bootstrap, args.dir, incremental=args.incremental, progress=bar)
    finally:
        bar.close()
    records = sum(s["to"] - s["from"] for parts in manifest.streams.values() for s in parts.values())
    messages = sum(q["messages"] for parts in manifest.queues.values() for q in parts.values())
    summary = {"kind": manifest.kind, "topics": len(manifest.topics), "records": records, "messages": messages,
               "groups": len(manifest.groups)}
    print(json.dumps(summary) if args.json else
          f"{manifest.kind} backup: {summary['topics']} topics, {records} records, {messages} queue messages, "
          f"{summary['groups']} groups' offsets")
    return 0


def run_verify(args) -> int:
    problems = verify_backup(args.dir)
    if args.json:
        print(json.dumps({"ok": not problems, "problems": problems}))
    else:
        print("\n".join(problems) if problems else f"{args.dir}: every backup verifies")
    return 1 if problems else 0


def run_restore(args, bootstrap: str) -> int:
    bar = Bar("restore")
    try:
        summary = restore_backup(args.dir, bootstrap, progress=bar)
    finally:
        bar.close()
    print(json.dumps(summary) if args.json else
          f"restored {summary['topics']} topics, {summary['records']} records, {summary['messages']} queue "
          f"messages, {summary['group_offsets']} committed offsets")
    return 0
