"""What one replica's queue state machine spends applying leases and acks, without a cluster around it.

`python -m raftbus.bench.queue_apply_cost [--messages N] [--batch B] [--rows] [--backlog K]` enqueues N messages
(100-byte records, priorities 0-9, seeded) into a QueueStateMachine over a real LmdbStore in a temporary directory
(as runs, state/runs.py, the way a broker with `queue_runs_enabled` stores them; as rows with `--rows`), and K more
at priority 10 (delivered after them: a backlog that stays stored), then applies leases of B messages, each
followed by one ack of the batch (packed, with a settler), until the N messages are acked, then ticks past the
leases' deadline until no in-flight index entry is left (acked messages leave that
index lazily, when their deadline comes), and prints one JSON line: the process CPU time per message of the
enqueue, lease, ack and expiry-tick commands, and of reading each lease's rows (`answer_cpu_us_per_message`: what
only the leader that answers a lease does; rows are built by every replica's lease). With
`--fill-only` it stops after the enqueues: the difference between the two runs under
`valgrind --tool=cachegrind --cache-sim=no` is the instruction count of the leases and acks, a figure the load
of a shared machine cannot move (docs/performance.md).
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time

from raftbus.broker.queues import commands as queue_commands
from raftbus.broker.queues.state.machine import QueueStateMachine
from raftbus.broker.storage.lmdb_store import LmdbStore

RECORD_BYTES = 100
PRIORITIES = 10
STAMPED_MS = 1_000_000
VISIBILITY_MS = 60_000
LEASE_BYTES_MAX = 4 << 20
MAP_SIZE_BYTES = 1 << 27
SETTLER_ID = b"s" * 16
DELIVERY_ONE = (1).to_bytes(4, "big")


class Replica:
    """A queue state machine and the Raft index of its next command."""

    def __init__(self, store: LmdbStore):
        self.machine = QueueStateMachine(store)
        self.index = 0

    def apply(self, command: bytes):
        self.index += 1
        return self.machine.apply(self.index, command)


def fill(replica: Replica, messages: int, batch: int, runs: bool, priority: int | None = None) -> float:
    """Enqueue the messages (priorities 0-9 seeded, or all at `priority`); the CPU seconds of the enqueue commands."""
    rng = random.Random(messages)
    record = bytes(RECORD_BYTES)
    spent = 0.0
    for start in range(0, messages, batch):
        items = [queue_commands.EnqueueItem(rng.randrange(PRIORITIES) if priority is None else priority, 0, 0, 0, 0,
                                            b"", b"", b"", record)
                 for _ in range(min(batch, messages - start))]
        command = queue_commands.encode_enqueue(STAMPED_MS, queue_commands.QueuePolicy(), items, runs=runs)
        started = time.process_time()
        replica.apply(command)
        spent += time.process_time() - started
    return spent


def drain(replica: Replica, batch: int, messages: int) -> dict:
    """Lease and ack until `messages` are acked or nothing is ready; CPU seconds of each kind of command and the
    messages acked."""
    lease_s = ack_s = answer_s = 0.0
    acked = 0
    policy = queue_commands.QueuePolicy()
    for sequence in range(1, sys.maxsize):
        if acked >= messages:
            break
        started = time.process_time()
        leased = replica.apply(queue_commands.encode_lease(STAMPED_MS, policy, min(batch, messages - acked),
                                                          LEASE_BYTES_MAX, VISIBILITY_MS))
        leased_at = time.process_time()
        if not leased:
            break
        answering = time.process_time()
        rows = leased.rows
        answer_s += time.process_time() - answering
        assert len(rows) == len(leased)
        leases = b"".join(key + DELIVERY_ONE for key in leased.seq_keys)
        command = queue_commands.encode_ack_packed(STAMPED_MS, policy, leases, settler_id=SETTLER_ID, sequence=sequence)
        acking = time.process_time()
        answers = replica.apply(command)
        ack_s += time.process_time() - acking
        lease_s += leased_at - started
        acked += answers.count(None)
    return {"acked": acked, "lease_cpu_s": lease_s, "ack_cpu_s": ack_s, "answer_cpu_s": answer_s}


def expire(replica: Replica) -> dict:
    """Tick past every lease's deadline until nothing is due; CPU seconds and the ticks applied."""
    policy, ticks = queue_commands.QueuePolicy(), 0
    started = time.process_time()
    while replica.machine.next_due_ms() is not None:
        replica.apply(queue_commands.encode_tick(STAMPED_MS + VISIBILITY_MS, policy))
        ticks += 1
    return {"expiry_cpu_s": time.process_time() - started, "expiry_ticks": ticks}


def run(messages: int, batch: int, fill_only: bool, runs: bool = True, backlog: int = 0) -> dict:
    path = tempfile.mkdtemp(prefix="raftbus-apply-cost-")
    store = LmdbStore(path, QueueStateMachine.TABLES, MAP_SIZE_BYTES)
    try:
        replica = Replica(store)
        enqueue_s = fill(replica, messages, batch, runs)
        if backlog:
            fill(replica, backlog, batch, runs, priority=PRIORITIES)
        if fill_only:
            return {"messages": messages, "batch": batch, "runs": runs, "backlog": backlog, "drained": False}
        drained = drain(replica, batch, messages)
        drained.update(expire(replica))
        left = replica.machine.counts()
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)
    per = 1e6 / max(drained["acked"], 1)
    return {"messages": messages, "batch": batch, "runs": runs, "backlog": backlog, "drained": True,
            "acked": drained["acked"],
            "left": list(left), "enqueue_cpu_us_per_message": round(enqueue_s * per, 2),
            "lease_cpu_us_per_message": round(drained["lease_cpu_s"] * per, 2),
            "answer_cpu_us_per_message": round(drained["answer_cpu_s"] * per, 2),
            "ack_cpu_us_per_message": round(drained["ack_cpu_s"] * per, 2),
            "expiry_cpu_us_per_message": round(drained["expiry_cpu_s"] * per, 2), "expiry_ticks": drained["expiry_ticks"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raftbus.bench.queue_apply_cost",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1_000, help="messages per lease and per ack")
    parser.add_argument("--fill-only", action="store_true", help="enqueue only (the baseline to subtract)")
    parser.add_argument("--rows", action="store_true", help="store the messages as rows (ENQUEUE), not runs")
    parser.add_argument("--backlog", type=int, default=0,
                        help="messages enqueued after them and left stored (delivered last)")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.batch < 1 or args.backlog < 0:
        parser.error("--messages and --batch must be >= 1, --backlog >= 0")
    print(json.dumps(run(args.messages, args.batch, args.fill_only, runs=not args.rows, backlog=args.backlog)),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
