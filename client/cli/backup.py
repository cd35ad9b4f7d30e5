"""`raftbus backup create DIR [--incremental]`, `backup verify DIR`, `backup restore DIR --bootstrap OTHER` (each with
`--key-file K` for encrypted backups) and `backup create-key K` (progress bars on standard error when it is a
terminal)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from raftbus.cli.progress import ProgressBar

from raftbus.client.backup import BackupKey, create_backup, create_key_file, restore_backup, verify_backup
from raftbus.client.errors import CorruptBackup


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
    for parser in (create, verify, restore):
        parser.add_argument("--key-file", type=Path, metavar="K",
                            help="encrypt (create) or decrypt (verify, restore) with this key file")
    create_key = actions.add_parser("create-key", parents=[common], help="a new key file for encrypted backups")
    create_key.add_argument("key_file", type=Path, metavar="K", help="where to write it (never over a file)")
    create_key.set_defaults(handler=run_create_key)


def key_of(args) -> BackupKey | None:
    return BackupKey.load(args.key_file) if args.key_file is not None else None


class Bar(ProgressBar):
    """A bar over partitions, told each partition as it is done."""

    def __init__(self, what: str):
        super().__init__(what, "partition")

    def __call__(self, item: str, done: int, total: int) -> None:
        self.show(done, total, item)


def run_create(args, bootstrap: str) -> int:
    bar = Bar("backup")
    try:
        manifest = create_backup(bootstrap, args.dir, incremental=args.incremental, progress=bar, key=key_of(args))
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
    problems = verify_backup(args.dir, key_of(args))
    if args.json:
        print(json.dumps({"ok": not problems, "problems": problems} |
                         ({"code": CorruptBackup.code} if problems else {})))
    else:
        print("\n".join(problems) if problems else f"{args.dir}: every backup verifies")
    return 1 if problems else 0


def run_restore(args, bootstrap: str) -> int:
    bar = Bar("restore")
    try:
        summary = restore_backup(args.dir, bootstrap, progress=bar, key=key_of(args))
    finally:
        bar.close()
    print(json.dumps(summary) if args.json else
          f"restored {summary['topics']} topics, {summary['records']} records, {summary['messages']} queue "
          f"messages, {summary['group_offsets']} committed offsets")
    return 0


def run_create_key(args) -> int:
    key = create_key_file(args.key_file)
    print(json.dumps({"key_file": str(args.key_file), "key_id": key.key_id}) if args.json else
          f"{args.key_file}: a new backup key (key id {key.key_id}); keep a copy apart from the backups")
    return 0
