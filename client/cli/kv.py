"""`raftbus kv get|put|del|ls|history|watch TABLE ...`: a key-value table over a compacted topic
(raftbus.client.Table, docs/compaction.md). Keys and values are given and printed as UTF-8 text (bytes that are
not UTF-8 print escaped); `--json` prints one JSON object per line."""
from __future__ import annotations

import argparse
import json
import sys

from raftbus.client.errors import InvalidArgument
from raftbus.client.table import Entry, Table, WatchEvent


def add_kv_commands(sub, common: argparse.ArgumentParser, bootstrap_of) -> None:
    kv = sub.add_parser("kv", help="a key-value table over a compacted topic: get, put, del, ls, history, watch")
    actions = kv.add_subparsers(dest="kv_command", required=True)
    get = actions.add_parser("get", parents=[common], help="print a key's latest value (exit 1 when it has none)")
    get.add_argument("table")
    get.add_argument("key")
    get.set_defaults(handler=lambda args: run_get(args, bootstrap_of(args)))
    for name, text in (("put", "write a key's value; prints its revision"),
                       ("del", "delete a key (a tombstone); prints its revision")):
        parser = actions.add_parser(name, parents=[common], help=text)
        parser.add_argument("table")
        parser.add_argument("key")
        if name == "put":
            parser.add_argument("value")
        parser.add_argument("--expected-revision", type=int,
                            help="compare-and-set: only while the key's latest revision is this (-1: no value)")
        parser.set_defaults(handler=lambda args: run_put(args, bootstrap_of(args)))
    ls = actions.add_parser("ls", parents=[common], help="list the live keys, in byte order")
    ls.add_argument("table")
    ls.add_argument("--prefix", default="")
    ls.set_defaults(handler=lambda args: run_ls(args, bootstrap_of(args)))
    history = actions.add_parser("history", parents=[common], help="a key's values still in the log, oldest first")
    history.add_argument("table")
    history.add_argument("key")
    history.set_defaults(handler=lambda args: run_history(args, bootstrap_of(args)))
    watch = actions.add_parser("watch", parents=[common], help="print the current values, then every change")
    watch.add_argument("table")
    watch.add_argument("--prefix", default="")
    watch.add_argument("--after", type=_after, help="resume after revisions: R (one-partition table) or P:R,P:R")
    watch.add_argument("--max", type=int, help="stop after this many events")
    watch.set_defaults(handler=lambda args: run_watch(args, bootstrap_of(args)))


def _after(text: str):
    try:
        if ":" not in text:
            return int(text)
        return {int(p): int(r) for p, r in (part.split(":") for part in text.split(","))}
    except ValueError:
        raise argparse.ArgumentTypeError(f"--after is R or P:R[,P:R...], not {text!r}") from None


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def _line(item: Entry | WatchEvent, as_json: bool, *, with_key: bool = True) -> str:
    if as_json:
        data = {"key": _text(item.key), "value": _text(item.value), "revision": item.revision,
                "partition": item.partition, "timestamp_ms": item.timestamp_ms}
        if isinstance(item, WatchEvent):
            data["deleted"] = item.deleted
        return json.dumps(data)
    value = "(deleted)" if item.value is None else _text(item.value)
    return f"{_text(item.key)}\t{value}\t@{item.revision}" if with_key else f"{value}\t@{item.revision}"


def run_get(args, bootstrap: str) -> int:
    with Table(bootstrap, args.table) as table:
        entry = table.get(args.key)
    if entry is None:
        print(f"key {args.key!r} has no value in {args.table}", file=sys.stderr)
        return 1
    print(_line(entry, args.json) if args.json else _text(entry.value))
    return 0


def run_put(args, bootstrap: str) -> int:
    value = getattr(args, "value", None)
    if args.expected_revision is not None and args.expected_revision < -1:
        raise InvalidArgument("--expected-revision is a revision or -1 (the key has no value)")
    with Table(bootstrap, args.table) as table:
        revision = table.put(args.key, value, expected_revision=args.expected_revision)
    print(json.dumps({"key": args.key, "revision": revision}) if args.json else revision)
    return 0


def run_ls(args, bootstrap: str) -> int:
    with Table(bootstrap, args.table) as table:
        keys = [_text(k) for k in table.keys(args.prefix)]
    print(json.dumps(keys) if args.json else "\n".join(keys), end="\n" if keys or args.json else "")
    return 0


def run_history(args, bootstrap: str) -> int:
    with Table(bootstrap, args.table) as table:
        for entry in table.history(args.key):
            print(_line(entry, args.json, with_key=False))
    return 0


def run_watch(args, bootstrap: str) -> int:
    with Table(bootstrap, args.table) as table:
        for seen, event in enumerate(table.watch(args.prefix, after=args.after), start=1):
            print(_line(event, args.json), flush=True)
            if args.max is not None and seen >= args.max:
                break
    return 0
