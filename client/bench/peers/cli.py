"""`python -m raftbus.bench.peers`: raftbus, NATS JetStream and Redis Streams benchmarked in one run.

raftbus runs first, exactly as `raftbus bench all` with the same counts; then each peer on its own fresh servers.
Every workload prints one JSON line on stdout; at the end the report (machine, command, table of
raftbus / peer ratios) follows in Markdown, and --out / --table-out also write the JSON document / the report.
A system that fails is reported as FAILED with its error, the others still run, and the exit status is 1.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import traceback
from pathlib import Path

from raftbus.bench import runner
from raftbus.bench.peers import report
from raftbus.client.errors import InvalidArgument, RaftbusError, Unavailable

PROG = "python -m raftbus.bench.peers"
BATCH_RECORDS_DEFAULT = 1_000
REDIS_APPENDONLY = ("everysec", "no")
COUNT_FLAGS = ("records", "queue_records", "record_bytes", "partitions", "producers", "readers", "batch_records",
               "kv_keys")


def systems_list(text: str) -> tuple[str, ...]:
    systems = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in systems if name not in report.SYSTEMS]
    if unknown or not systems:
        raise argparse.ArgumentTypeError(f"systems are a comma-separated subset of {','.join(report.SYSTEMS)}")
    return systems


def build_parser() -> argparse.ArgumentParser:
    """Counts default to `raftbus bench`'s own defaults, so a plain run compares like with like."""
    defaults = runner.build_parser().parse_args(["all"])
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=defaults.records, help="produced, then consumed")
    parser.add_argument("--queue-records", type=int, default=None,
                        help="messages through the queue workload (default: --records)")
    parser.add_argument("--record-bytes", type=int, default=defaults.record_bytes)
    parser.add_argument("--partitions", type=int, default=defaults.partitions,
                        help="raftbus partitions; NATS subjects with one consumer each; Redis stream keys")
    parser.add_argument("--producers", type=int, default=defaults.producers, help="producer processes")
    parser.add_argument("--readers", type=int, default=defaults.readers, help="reader (and queue worker) processes")
    parser.add_argument("--kv-keys", type=int, default=defaults.kv_keys,
                        help="keys of the raftbus table and of the NATS key-value bucket")
    parser.add_argument("--batch-records", type=int, default=BATCH_RECORDS_DEFAULT,
                        help="peers: records per Redis pipeline, per NATS fetch and per ack batch")
    parser.add_argument("--systems", type=systems_list, default=report.SYSTEMS,
                        help="comma-separated subset of raftbus,nats,redis")
    parser.add_argument("--redis-appendonly", choices=REDIS_APPENDONLY, default="everysec",
                        help="everysec: AOF in page cache, fsync each second (default); no: memory only")
    parser.add_argument("--out", help="write the JSON document (figures, ratios, machine, command) here")
    parser.add_argument("--table-out", help="write the Markdown report here")
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.queue_records is None:
        args.queue_records = args.records
    for name in COUNT_FLAGS:
        if getattr(args, name) < 1:
            raise InvalidArgument(f"--{name.replace('_', '-')} must be >= 1")
    return args


def raftbus_argv(args: argparse.Namespace) -> list[str]:
    """The `raftbus bench` arguments with the same counts: the queue workload moves --queue-records messages with
    --readers worker processes, as the peers' queue workloads do."""
    return ["all", "--records", str(args.records), "--record-bytes", str(args.record_bytes),
            "--partitions", str(args.partitions), "--producers", str(args.producers),
            "--readers", str(args.readers), "--messages", str(args.queue_records), "--consumers", str(args.readers),
            "--kv-keys", str(args.kv_keys)]


def settings_figures(args: argparse.Namespace) -> dict:
    return {name: getattr(args, name) for name in COUNT_FLAGS} | {
        "systems": list(args.systems), "redis_appendonly": args.redis_appendonly}


# ---------------------------------------------------------------------- systems

def run_raftbus(args: argparse.Namespace, lines: list[dict]) -> None:
    bench_args = runner.build_parser().parse_args(raftbus_argv(args))
    runner.check_args(bench_args)
    lines += [{"system": "raftbus", **line} for line in runner.run_benchmarks(bench_args)]


def run_nats(args: argparse.Namespace, lines: list[dict]) -> None:
    try:
        from raftbus.bench.peers import nats_bench
    except ModuleNotFoundError as exc:
        raise Unavailable(f"{exc.name} is missing: pip install 'raftbus[peers]' (make bench-peers does)") from None
    nats_bench.run(args, lines)


def run_redis(args: argparse.Namespace, lines: list[dict]) -> None:
    try:
        from raftbus.bench.peers import redis_bench
    except ModuleNotFoundError as exc:
        raise Unavailable(f"{exc.name} is missing: pip install 'raftbus[peers]' (make bench-peers does)") from None
    redis_bench.run(args, lines)


RUNNERS = {"raftbus": run_raftbus, "nats": run_nats, "redis": run_redis}


def run_systems(args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    """(JSON lines of every workload that finished, {system, error} of every system that failed)."""
    lines, errors = [], []
    for system in args.systems:
        try:
            RUNNERS[system](args, lines)
        except Exception as exc:  # one system's failure is reported; the others still run
            if isinstance(exc, RaftbusError):
                message = f"{exc.code}: {exc.message}"
            else:
                traceback.print_exc()
                message = f"{type(exc).__name__}: {exc}"
            runner.progress(f"{system} failed: {message}")
            errors.append({"system": system, "error": message})
    return lines, errors


def build_document(args: argparse.Namespace, argv: list[str], lines: list[dict], errors: list[dict],
                   machine: dict) -> dict:
    results = report.by_system(lines)
    return {"command": " ".join([PROG, *map(shlex.quote, argv)]),
            "raftbus_command": shlex.join(["raftbus", "bench", *raftbus_argv(args)]),
            "machine": machine, "settings": settings_figures(args), "results": results,
            "rows": report.table_rows(results), "errors": errors}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
    except RaftbusError as err:
        print(f"error: {err.code}: {err.message}", file=sys.stderr)
        return 2
    machine = report.machine_figures()
    lines, errors = run_systems(args)
    document = build_document(args, argv, lines, errors, machine)
    markdown = report.report_markdown(document)
    if args.out:
        Path(args.out).write_text(json.dumps(document, indent=2) + "\n")
        runner.progress(f"results written to {args.out}")
    if args.table_out:
        Path(args.table_out).write_text(markdown + "\n")
    print(markdown, flush=True)
    return 1 if errors else 0
