"""The queue-topic parts of the `raftbus` command: `consume` on a queue topic and `queues ...`.

    raftbus consume QUEUE_TOPIC [--partition P] [--max N] [--timeout-ms T] [--no-ack] [--visibility-ms V]
    raftbus queues stats TOPIC [--groups]
    raftbus queues peek TOPIC [--partition P] [--state ready|delayed|in_flight|dead] [--max N]
    raftbus queues redrive TOPIC [--max N]
    raftbus queues get TOPIC ID
    raftbus queues delete TOPIC ID [ID ...]
    raftbus queues change-priority TOPIC ID [--priority P] [--deliver-at-ms T | --delay-ms D]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from raftbus.client import settings
from raftbus.client.errors import RaftbusError, WrongTopicKind
from raftbus.client.queues.consumer import QueueConsumer
from raftbus.client.queues.messages import Message, MessageMetadata, QueueStats
from raftbus.client.queues.admin import Queues

QUEUE_OPTIONS = ("max_deliveries", "backoff_base_ms", "backoff_max_ms", "max_in_flight_per_group",
                 "idempotency_window_ms")
STATES = ("ready", "delayed", "in_flight", "dead")


def add_topic_queue_options(create: argparse.ArgumentParser) -> None:
    """Queue options of `topics create` (unset: the broker's defaults)."""
    create.add_argument("--max-deliveries", type=int, help="queue topics: deliveries before <topic>.dlq")
    create.add_argument("--backoff-base-ms", type=int, help="queue topics: first retry delay")
    create.add_argument("--backoff-max-ms", type=int, help="queue topics: cap of the retry delay")
    create.add_argument("--max-in-flight-per-group", type=int, help="fair queue topics: leases per group")
    create.add_argument("--idempotency-window-ms", type=int, help="queue topics: how long keys are kept")


def topic_queue_options(args) -> dict:
    return {name: getattr(args, name) for name in QUEUE_OPTIONS if getattr(args, name, None) is not None}


def add_consume_queue_options(consume: argparse.ArgumentParser) -> None:
    consume.add_argument("--no-ack", action="store_true", help="queue topics: lease and print without acking")
    consume.add_argument("--visibility-ms", type=int, default=settings.QUEUE_VISIBILITY_MS,
                         help="queue topics: lease length")


def add_queue_commands(sub, common, bootstrap_of) -> None:
    queues = sub.add_parser("queues", help="inspect and manage queue topics")
    actions = queues.add_subparsers(dest="queues_command", required=True)
    stats = actions.add_parser("stats", parents=[common], help="ready, delayed, in flight and dead messages")
    stats.add_argument("topic")
    stats.add_argument("--groups", action="store_true", help="also per group")
    peek = actions.add_parser("peek", parents=[common], help="show messages without leasing them")
    peek.add_argument("topic")
    peek.add_argument("--partition", type=int)
    peek.add_argument("--state", choices=STATES, default="ready")
    peek.add_argument("--max", type=int, default=10)
    redrive = actions.add_parser("redrive", parents=[common], help="move <topic>.dlq messages back to <topic>")
    redrive.add_argument("topic")
    redrive.add_argument("--max", type=int)
    get = actions.add_parser("get", parents=[common], help="one message by id")
    get.add_argument("topic")
    get.add_argument("id", type=int)
    delete = actions.add_parser("delete", parents=[common], help="delete (cancel) messages by id")
    delete.add_argument("topic")
    delete.add_argument("ids", type=int, nargs="+", metavar="ID")
    change = actions.add_parser("change-priority", parents=[common], help="new priority or delivery time")
    change.add_argument("topic")
    change.add_argument("id", type=int)
    change.add_argument("--priority", type=int)
    when = change.add_mutually_exclusive_group()
    when.add_argument("--deliver-at-ms", type=int)
    when.add_argument("--delay-ms", type=int, help="deliver this long from now")
    for parser, handler in ((stats, run_stats), (peek, run_peek), (redrive, run_redrive), (get, run_get),
                            (delete, run_delete), (change, run_change_priority)):
        parser.set_defaults(handler=lambda args, h=handler: h(args, bootstrap_of(args)))


# ---------------------------------------------------------------------- output
def metadata_line(meta: MessageMetadata, as_json: bool) -> str:
    if as_json:
        return json.dumps({"topic": meta.topic, "partition": meta.partition, "message_id": meta.message_id,
                           "duplicate": meta.duplicate, "timestamp_ms": meta.timestamp_ms})
    return f"{meta.topic}/{meta.partition}#{meta.message_id}" + (" (duplicate)" if meta.duplicate else "")


def message_line(m: Message, as_json: bool, state: str | None = None) -> str:
    """One message: its state as read, or `state` (what the command made of it, e.g. "acked")."""
    fields = m.to_dict()
    fields["state"] = state or m.state
    if as_json:
        return json.dumps(fields)
    return (f"{m.topic}/{m.partition}#{m.message_id}\t{fields['state']}\tpriority={m.priority}\tgroup={m.group}\t"
            f"deliveries={m.delivery_count}\t{fields['key'] or ''}\t{fields['value'] or ''}")


def _table(headers: list[str], rows: list[list]) -> None:
    cells = [[str(v) for v in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def _age(value: int | None) -> str:
    return "-" if value is None else str(value)


def print_stats(stats: QueueStats, groups: bool) -> None:
    print(f"queue {stats.topic}: ready={stats.ready} delayed={stats.delayed} in_flight={stats.in_flight} "
          f"dead={stats.dead} dead_lettered={stats.dead_lettered} oldest_ready_age_ms={_age(stats.oldest_ready_age_ms)}")
    _table(["PARTITION", "READY", "DELAYED", "IN_FLIGHT", "DEAD", "OLDEST_READY_AGE_MS", "ENQUEUED_TOTAL",
            "NEXT_DELIVERY_MS"],
           [[p.partition, p.ready, p.delayed, p.in_flight, p.dead, _age(p.oldest_ready_age_ms), p.enqueued_total,
             _age(p.next_delivery_ms)] for p in stats.partitions])
    if groups and stats.groups:
        print()
        _table(["GROUP", "READY", "DELAYED", "IN_FLIGHT", "DEAD", "OLDEST_READY_AGE_MS"],
               [[g.group or "-", g.ready, g.delayed, g.in_flight, g.dead, _age(g.oldest_ready_age_ms)]
                for g in stats.groups])


# ---------------------------------------------------------------------- commands
def run_consume_queue(args, bootstrap: str) -> int:
    """Lease messages and ack them, printing each once its ack is done ("acked"; a refused ack is an error line
    and exit status 1: the message will be delivered again); with --no-ack print them leased ("in_flight") and let
    their leases expire."""
    if args.offset is not None or args.from_beginning:
        raise WrongTopicKind(f"--offset and --from-beginning read stream topics; {args.topic!r} is a queue topic, "
                             "which has no offsets: consume it without them")
    if args.max == 0:
        return 0
    idle_s = None if args.timeout_ms is None else args.timeout_ms / 1000
    printed = refused = 0
    partitions = None if args.partition is None else [args.partition]
    prefetch = max(1, min(settings.QUEUE_PREFETCH_MESSAGES, args.max or settings.QUEUE_PREFETCH_MESSAGES))
    with QueueConsumer(bootstrap, topics=[args.topic], partitions=partitions, visibility_ms=args.visibility_ms,
                       prefetch=prefetch) as consumer:
        last_s = time.monotonic()
        while args.max is None or printed < args.max:
            wanted = settings.QUEUE_POLL_MESSAGES_MAX if args.max is None else args.max - printed
            messages = consumer.poll(0.2, wanted)
            if not messages:
                if idle_s is not None and time.monotonic() - last_s >= idle_s:
                    break
                continue
            last_s = time.monotonic()
            if args.no_ack:
                for message in messages:
                    print(message_line(message, args.json), flush=True)
            else:
                refused += _ack_and_print(messages, args.json)
            printed += len(messages)
        consumer.flush(settings.REQUEST_TIMEOUT_MS / 1000)
    return 1 if refused else 0


def _ack_and_print(messages: list[Message], as_json: bool) -> int:
    """Ack a poll's messages together, then print each as acked, or its refusal on stderr; how many were refused."""
    acks = [(message, message.ack()) for message in messages]
    refused = 0
    for message, ack in acks:
        try:
            ack.result(settings.REQUEST_TIMEOUT_MS / 1000)
        except RaftbusError as err:
            refused += 1
            print(f"error: {err.code}: message {message.message_id}: {err.message}", file=sys.stderr, flush=True)
            continue
        print(message_line(message, as_json, state="acked"), flush=True)
    return refused


def run_stats(args, bootstrap: str) -> int:
    with Queues(bootstrap) as queues:
        stats = queues.stats(args.topic)
    if args.json:
        print(json.dumps(stats.to_dict()))
    else:
        print_stats(stats, args.groups)
    return 0


def run_peek(args, bootstrap: str) -> int:
    with Queues(bootstrap) as queues:
        for message in queues.peek(args.topic, args.partition, args.state, args.max):
            print(message_line(message, args.json))
    return 0


def run_redrive(args, bootstrap: str) -> int:
    with Queues(bootstrap) as queues:
        moved = queues.redrive(args.topic, args.max)
    print(json.dumps({"topic": args.topic, "moved": moved}) if args.json
          else f"moved {moved} messages from {args.topic}.dlq back to {args.topic}")
    return 0


def run_get(args, bootstrap: str) -> int:
    with Queues(bootstrap) as queues:
        print(message_line(queues.get(args.topic, args.id), args.json))
    return 0


def run_delete(args, bootstrap: str) -> int:
    with Queues(bootstrap) as queues:
        answers = queues.delete(args.topic, args.ids)
    failed = 0
    for mid, error in zip(args.ids, answers):
        if args.json:
            print(json.dumps({"message_id": mid, "deleted": error is None,
                              "error": None if error is None else error.code}))
        elif error is None:
            print(f"deleted {mid}")
        else:
            print(f"error: {error.code}: {error.message}", file=sys.stderr)
        failed += error is not None
    return 1 if failed else 0


def run_change_priority(args, bootstrap: str) -> int:
    deliver_at_ms = args.deliver_at_ms
    if args.delay_ms is not None:
        deliver_at_ms = time.time_ns() // 1_000_000 + args.delay_ms
    with Queues(bootstrap) as queues:
        print(message_line(queues.change_priority(args.topic, args.id, args.priority, deliver_at_ms), args.json))
    return 0
