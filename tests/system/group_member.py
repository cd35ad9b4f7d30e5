"""One consumer-group member as its own OS process (for tests/system/test_groups.py).

    python -m tests.system.group_member --bootstrap H:P,... --group G --topic T --out FILE [--session-timeout-ms N]

It polls with the SDK Consumer, appends one JSON line per processed record to FILE and flushes it to the OS
before committing (so a kill -9 never loses a committed record's line), and a line with its owned partitions
whenever its generation or assignment changes. SIGTERM closes the consumer (leaving the group) and exits.
"""
from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading

from raftbus.client import Consumer, RaftbusError


class Journal:
    """Line-buffered JSON lines: every line reaches the OS when written."""

    def __init__(self, path: str):
        self._file = open(path, "a", buffering=1)

    def write(self, lines: list[dict]) -> None:
        if lines:
            self._file.write("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
            self._file.flush()


class CommitOnRevoke:
    """Commits what was processed before a partition is given up (auto-commit is off)."""

    def __init__(self):
        self.consumer: Consumer | None = None

    def on_partitions_revoked(self, partitions) -> None:
        try:
            self.consumer.commit()
        except RaftbusError as err:
            logging.info("commit on revoke failed: %s", err)


def run(args, stop: threading.Event) -> None:
    journal = Journal(args.out)
    listener = CommitOnRevoke()
    consumer = Consumer(args.bootstrap, group=args.group, topics=[args.topic], auto_offset_reset="earliest",
                        enable_auto_commit=False, session_timeout_ms=args.session_timeout_ms,
                        heartbeat_interval_ms=args.heartbeat_interval_ms, client_id="member", listener=listener)
    listener.consumer = consumer
    seen = None
    try:
        while not stop.is_set():
            records = consumer.poll(0.2)
            generation = consumer.generation
            owned = sorted(consumer.assignment())
            if (generation, owned) != seen:
                seen = (generation, owned)
                journal.write([{"m": consumer.member_id, "g": generation, "owned": owned}])
            journal.write([{"m": consumer.member_id, "g": generation, "p": r.partition, "o": r.offset,
                            "v": r.value.decode()} for r in records])
            if records:
                try:
                    consumer.commit()
                except RaftbusError as err:  # the next owner reprocesses from the last commit
                    logging.info("commit failed: %s", err)
    finally:
        consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=300)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    run(args, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
