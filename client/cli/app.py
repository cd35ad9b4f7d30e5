"""The `raftbus` command: run brokers, administer topics, produce, consume, check the cluster, benchmark.

`--bootstrap host:port[,...]` (else RAFTBUS_BOOTSTRAP, else localhost:7070) says where the cluster is and
`--json` switches read commands to JSON output; both go before or after the subcommand. Failures print
`error: CODE: message` to stderr and exit 1, one line whatever failed (an unexpected failure is `INTERNAL`; its
traceback follows with RAFTBUS_LOG_LEVEL=DEBUG); usage errors are one line and exit 2. `broker start` and `dev` run
the broker process's own entry point (raftbus.broker.main, which declares their flags) in this process.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator

from boltons.strutils import bytes2human

from raftbus.broker import main as broker_main
from raftbus.client import settings
from raftbus.bench import runner as bench_runner
from raftbus.cli import backup as backup_cli
from raftbus.cli import brokers as broker_cli
from raftbus.cli import groups as group_cli
from raftbus.cli import movement as movement_cli
from raftbus.cli import queues as cli_queues
from raftbus.cli import security as security_cli
from raftbus.cli import verify as cli_verify
from raftbus.client.admin import Admin, ClusterStatus, TopicDescription
from raftbus.client.errors import RaftbusError, WrongTopicKind
from raftbus.gateway.cli import add_http_command
from raftbus.client.producer import Producer
from raftbus.client.queues.messages import MessageMetadata
from raftbus.client.reader import EARLIEST, LATEST, Reader
from raftbus.client.records import Record, RecordMetadata

# ---------------------------------------------------------------------- parser

def _common_options() -> argparse.ArgumentParser:
    """--bootstrap and --json for leaf commands; SUPPRESS keeps a value given before the subcommand."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap", default=argparse.SUPPRESS, help="host:port[,host:port...]")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="JSON output")
    security_cli.add_credential_options(common)
    return common


def header_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"header must be name=value, not {text!r}")
    return name, value


def offset_position(text: str) -> str | int:
    if text in (EARLIEST, LATEST):
        return text
    try:
        offset = int(text)
    except ValueError:
        offset = -1
    if offset < 0:
        raise argparse.ArgumentTypeError(f"offset must be earliest, latest or an integer >= 0, not {text!r}")
    return offset


def _add_broker_commands(sub, common) -> None:
    """`broker start` and `dev`, with the broker's own flags (raftbus.broker.main declares them)."""
    broker = sub.add_parser("broker", help="run a broker").add_subparsers(dest="broker_command", required=True)
    start = broker.add_parser("start", help="run one broker")
    broker_main.add_start_arguments(start)
    start.set_defaults(handler=broker_main.run)
    dev = sub.add_parser("dev", help="a local N-broker cluster on loopback (Ctrl-C stops it)")
    broker_main.add_dev_arguments(dev)
    dev.set_defaults(handler=broker_main.run)


def _add_topic_commands(sub, common) -> None:
    topics = sub.add_parser("topics", help="create, list, describe, alter and delete topics")
    actions = topics.add_subparsers(dest="topics_command", required=True)
    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, help="default: the cluster's default_partitions (3)")
    create.add_argument("--replication-factor", type=int,
                        help="default: the cluster's default_replication_factor (3)")
    create.add_argument("--kind", choices=("stream", "queue"), default="stream")
    create.add_argument("--ordering", choices=("priority", "fair"))
    create.add_argument("--retention-ms", type=int)
    create.add_argument("--retention-bytes", type=int)
    cli_queues.add_topic_queue_options(create)
    create.set_defaults(handler=run_topics_create)
    actions.add_parser("list", parents=[common], help="list topics").set_defaults(handler=run_topics_list)
    for action, handler, text in (("describe", run_topics_describe, "describe a topic"),
                                  ("delete", run_topics_delete, "delete a topic and its records")):
        parser = actions.add_parser(action, parents=[common], help=text)
        parser.add_argument("name")
        parser.set_defaults(handler=handler)
    alter = actions.add_parser("alter", parents=[common],
                               help="grow a topic's partitions, change its retention or its queue options")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, help="new total (grow only)")
    alter.add_argument("--retention-ms", type=int, help="-1 = unlimited")
    alter.add_argument("--retention-bytes", type=int, help="per partition; -1 = unlimited")
    cli_queues.add_topic_queue_options(alter)
    alter.set_defaults(handler=run_topics_alter)
    cli_verify.add_topic_verify(actions, common, bootstrap_of)


def _add_data_commands(sub, common) -> None:
    produce = sub.add_parser("produce", parents=[common], help="send one record per stdin line, or --value")
    produce.add_argument("topic")
    produce.add_argument("--key")
    produce.add_argument("--partition", type=int)
    produce.add_argument("--value")
    produce.add_argument("--header", type=header_pair, action="append", default=[], metavar="NAME=VALUE")
    produce.add_argument("--priority", type=int, help="queue topics only")
    produce.add_argument("--group", help="queue topics only")
    produce.add_argument("--delay-ms", type=int, help="queue topics only")
    produce.add_argument("--idempotency-key", help="queue topics only")
    produce.set_defaults(handler=run_produce)
    consume = sub.add_parser("consume", parents=[common], help="print records of a topic")
    consume.add_argument("topic")
    consume.add_argument("--partition", type=int)
    consume.add_argument("--offset", type=offset_position, help="earliest, latest or an offset (with --partition)")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--max", type=int, help="stop after this many records")
    consume.add_argument("--timeout-ms", type=int, help="stop after this long without a record")
    consume.add_argument("--group", help="consume as a member of this consumer group (commits what it prints)")
    cli_queues.add_consume_queue_options(consume)
    consume.set_defaults(handler=run_consume)
    cluster = sub.add_parser("cluster", help="cluster status, metadata verification") \
        .add_subparsers(dest="cluster_command", required=True)
    cluster.add_parser("status", parents=[common], help="brokers, controller, partition leaders and ISR") \
        .set_defaults(handler=run_cluster_status)
    cli_verify.add_cluster_verify(cluster, common, bootstrap_of)
    bench_parser = sub.add_parser("bench", help="throughput and latency figures (one JSON line each)")
    bench_runner.add_arguments(bench_parser)
    security_cli.add_credential_options(bench_parser)
    bench_parser.set_defaults(handler=bench_runner.main)


def build_parser() -> argparse.ArgumentParser:
    parser = broker_main.UsageParser(prog="raftbus", description="raftbus: a Raft-replicated message broker")
    parser.add_argument("--bootstrap", default=None,
                        help=f"host:port[,host:port...] (default: ${settings.BOOTSTRAP_ENV} or "
                             f"{settings.BOOTSTRAP_DEFAULT})")
    parser.add_argument("--json", action="store_true", default=False, help="JSON output for read commands")
    security_cli.add_credential_options(parser, default=None)
    sub = parser.add_subparsers(dest="command", required=True)
    common = _common_options()
    _add_broker_commands(sub, common)
    _add_topic_commands(sub, common)
    _add_data_commands(sub, common)
    group_cli.add_group_commands(sub, common, {"list": run_groups_list, "describe": run_groups_describe,
                                               "reset-offsets": run_groups_reset_offsets})
    cli_queues.add_queue_commands(sub, common, bootstrap_of)
    movement_cli.add_reassign_command(cli_verify.add_partition_commands(sub, common, bootstrap_of), common,
                                        bootstrap_of)
    broker_cli.add_broker_admin_commands(sub, common, bootstrap_of)
    backup_cli.add_backup_commands(sub, common, bootstrap_of)
    add_http_command(sub, common)
    security_cli.add_security_commands(sub, common, bootstrap_of)
    security_cli.add_secret_command(sub, common)
    security_cli.add_certs_command(sub, common)
    return parser


def check_usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Rules argparse cannot express; parser.error exits with status 2."""
    if args.command == "consume" and args.offset is not None and args.partition is None:
        parser.error("consume: --offset needs --partition")
    if args.command == "consume" and args.max is not None and args.max < 0:
        parser.error("consume: --max must be >= 0")
    if args.command == "topics" and args.topics_command == "alter" and not _alterations(args) \
            and args.partitions is None:
        parser.error("topics alter: give --partitions, --retention-ms, --retention-bytes or a queue option")
    group_cli.check_group_usage(parser, args)


def bootstrap_of(args: argparse.Namespace) -> str:
    return args.bootstrap or settings.bootstrap_default()


# ---------------------------------------------------------------------- output

def print_table(headers: list[str], rows: list[list]) -> None:
    cells = [[str(v) for v in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def size_text(size_bytes: int) -> str:
    """A byte count as given, with its human-readable size beside it from 1 KiB up (boltons' bytes2human)."""
    if size_bytes < 1024:
        return str(size_bytes)
    return f"{size_bytes} ({bytes2human(size_bytes, ndigits=1)}iB)"


def ids(values) -> str:
    return ",".join(str(v) for v in values) or "-"


def print_topic(topic: TopicDescription, as_json: bool) -> None:
    if as_json:
        print(json.dumps(topic.to_dict()))
        return
    ordering = f" ordering={topic.ordering}" if topic.ordering else ""
    print(f"topic {topic.name} id={topic.topic_id} kind={topic.kind}{ordering} "
          f"retention_ms={topic.retention_ms} retention_bytes={size_text(topic.retention_bytes)}")
    print_table(["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG_START", "HIGH_WATERMARK"],
                [[p.partition, p.leader_id or "-", ids(p.replicas), ids(p.isr), p.log_start_offset,
                  p.high_watermark] for p in topic.partitions])


def print_cluster(status: ClusterStatus) -> None:
    print(f"cluster {status.cluster_id or '-'}; controller: {status.controller_id or 'none'} "
          f"(answered by broker {status.answering_broker_id})")
    print_table(["BROKER", "ADDRESS", "RAFT_ADDRESS", "ALIVE", "STATE", "ROLE", "METRICS_URL"],
                [[b.broker_id, b.address, b.raft_address, "yes" if b.alive else "no", b.state,
                  "controller" if b.broker_id == status.controller_id else "", b.metrics_url or "-"]
                 for b in status.brokers])
    rows = [[t.name, p.partition, p.leader_id or "-", ids(p.replicas), ids(p.isr)]
            for t in status.topics for p in t.partitions]
    if rows:
        print()
        print_table(["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"], rows)


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def record_line(record: Record, as_json: bool) -> str:
    if as_json:
        return json.dumps({"topic": record.topic, "partition": record.partition, "offset": record.offset,
                           "timestamp_ms": record.timestamp_ms, "key": _text(record.key),
                           "value": _text(record.value),
                           "headers": [[name, _text(value)] for name, value in record.headers]})
    return f"{record.topic}/{record.partition}@{record.offset}\t{_text(record.key) or ''}\t{_text(record.value) or ''}"


def ack_line(meta: RecordMetadata | MessageMetadata, as_json: bool) -> str:
    if isinstance(meta, MessageMetadata):
        return cli_queues.metadata_line(meta, as_json)
    if as_json:
        return json.dumps({"topic": meta.topic, "partition": meta.partition, "offset": meta.offset,
                           "timestamp_ms": meta.timestamp_ms})
    return f"{meta.topic}/{meta.partition}@{meta.offset}"


# ---------------------------------------------------------------------- commands

def run_topics_create(args) -> int:
    with Admin(bootstrap_of(args)) as admin:
        topic = admin.create_topic(args.name, partitions=args.partitions, replication_factor=args.replication_factor,
                                   kind=args.kind, ordering=args.ordering, retention_ms=args.retention_ms,
                                   retention_bytes=args.retention_bytes, **cli_queues.topic_queue_options(args))
    print_topic(topic, args.json)
    return 0


def run_topics_list(args) -> int:
    with Admin(bootstrap_of(args)) as admin:
        topics = admin.list_topics()
    if args.json:
        print(json.dumps([t.to_dict() for t in topics]))
        return 0
    print_table(["TOPIC", "KIND", "PARTITIONS", "REPLICATION_FACTOR", "RETENTION_MS", "RETENTION_BYTES"],
                [[t.name, t.kind, len(t.partitions), len(t.partitions[0].replicas) if t.partitions else 0,
                  t.retention_ms, t.retention_bytes] for t in topics])
    return 0


def run_topics_describe(args) -> int:
    with Admin(bootstrap_of(args)) as admin:
        print_topic(admin.describe_topic(args.name), args.json)
    return 0


def run_topics_delete(args) -> int:
    with Admin(bootstrap_of(args)) as admin:
        admin.delete_topic(args.name)
    print(json.dumps({"deleted": args.name}) if args.json else f"deleted topic {args.name}")
    return 0


def _alterations(args) -> dict:
    """The settings `topics alter` changes (partitions apart)."""
    changed = {name: getattr(args, name) for name in ("retention_ms", "retention_bytes")
               if getattr(args, name) is not None}
    return {**changed, **cli_queues.topic_queue_options(args)}


def run_topics_alter(args) -> int:
    settings_changed = _alterations(args)
    with Admin(bootstrap_of(args)) as admin:
        topic = admin.alter_topic(args.name, **settings_changed) if settings_changed else None
        if args.partitions is not None:
            topic = admin.alter_partitions(args.name, args.partitions)
        print_topic(topic, args.json)
    return 0


def run_cluster_status(args) -> int:
    with Admin(bootstrap_of(args)) as admin:
        status = admin.cluster_status()
        members = admin.metadata_members()
    if args.json:
        print(json.dumps({**status.to_dict(), "metadata_voters": list(members.voters),
                          "metadata_learners": list(members.learners)}))
    else:
        print_cluster(status)
        print(f"metadata voters: {ids(members.voters)}; non-voters (learners): {ids(members.learners)}")
    return 0


def stdin_values() -> Iterator[str]:
    for line in sys.stdin:
        yield line.rstrip("\r\n")


def run_produce(args) -> int:
    deliver_at_ms = None if args.delay_ms is None else time.time_ns() // 1_000_000 + args.delay_ms
    queue_fields = {name: value for name, value in (("priority", args.priority), ("group", args.group),
                                                    ("deliver_at_ms", deliver_at_ms),
                                                    ("idempotency_key", args.idempotency_key)) if value is not None}
    values = [args.value] if args.value is not None else stdin_values()
    pending = deque()
    with Producer(bootstrap_of(args)) as producer:
        for value in values:
            pending.append(producer.send(args.topic, value, key=args.key, headers=args.header,
                                         partition=args.partition, **queue_fields))
            if len(pending) >= settings.CLI_PENDING_SENDS_MAX:
                print(ack_line(pending.popleft().result(), args.json))
        producer.flush()
        while pending:
            print(ack_line(pending.popleft().result(), args.json))
    return 0


def consumed_records(reader: Reader, args) -> Iterator[Record]:
    if args.partition is None:
        return reader.iter_topic(args.topic, from_beginning=args.from_beginning, idle_timeout_ms=args.timeout_ms)
    offset = args.offset if args.offset is not None else EARLIEST if args.from_beginning else LATEST
    return reader.iter_partition(args.topic, args.partition, offset=offset, idle_timeout_ms=args.timeout_ms)


def run_consume(args) -> int:
    with Admin(bootstrap_of(args)) as admin:
        kind = admin.describe_topic(args.topic).kind
    if kind == "queue":
        if args.group is not None:
            raise WrongTopicKind(f"--group reads stream topics; {args.topic!r} is a queue topic, which hands each "
                                 "message to one consumer anyway: consume it without --group")
        return cli_queues.run_consume_queue(args, bootstrap_of(args))
    if args.group is not None:
        return group_cli.run_consume_group(args, bootstrap_of(args), record_line)
    with Reader(bootstrap_of(args)) as reader:
        for record in itertools.islice(consumed_records(reader, args), args.max):
            print(record_line(record, args.json), flush=True)
    return 0


# ---------------------------------------------------------------------- consumer groups

def run_groups_list(args) -> int:
    return group_cli.run_groups_list(args, bootstrap_of(args), print_table)


def run_groups_describe(args) -> int:
    return group_cli.run_groups_describe(args, bootstrap_of(args), print_table)


def run_groups_reset_offsets(args) -> int:
    return group_cli.run_groups_reset_offsets(args, bootstrap_of(args), print_table)


# ---------------------------------------------------------------------- entry point

def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        check_usage(parser, args)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        security_cli.export_credentials(args)
        return args.handler(args) or 0
    except RaftbusError as err:
        print(f"error: {err.code}: {err.message}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `raftbus consume t | head`: the reader went away, which is not a failure
        _silence_stdout()
        return 0
    except OSError as exc:
        print(broker_main.os_error_line(exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug: still one line, the traceback on request
        if os.environ.get("RAFTBUS_LOG_LEVEL", "").upper() == "DEBUG":
            raise
        print(f"error: INTERNAL: {type(exc).__name__}: {exc} (RAFTBUS_LOG_LEVEL=DEBUG shows where)", file=sys.stderr)
        return 1
