"""Goal: storing messages as runs changes nothing anyone can observe. The same random commands applied to a
partition that stores rows and to one that stores runs give the same answers and the same reads after every
command (leases in the same order with the same rows, the same refusals, stats, scans, peeks), and the runs'
store keeps its invariants; a run is taken apart into rows when anything but a lease or an ack touches it."""
import random

import pytest

from raftbus.broker.queues import commands as queue_commands
from raftbus.broker.queues.state import runs
from raftbus.broker.queues.state.machine import QueueStateMachine
from raftbus.broker.queues.state.records import DEAD, DELAYED, IN_FLIGHT, READY, decode_message
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors
from tests.unit.broker.queues.harness import POLICY, QueueHarness, item


def normal(value):
    """A command's answer in a comparable form (errors by type and text)."""
    if isinstance(value, BaseException):
        return type(value).__name__, str(value)
    if isinstance(value, (list, tuple)) or type(value).__name__ == "LeasedBatch":
        return [normal(v) for v in value]
    return value


def reads(harness: QueueHarness, seqs) -> dict:
    sm = harness.sm
    return {
        "counts": sm.counts(),
        "due": (sm.next_due_ms(), sm.deliverable()),
        "get": [sm.get(seq) for seq in sorted(seqs)],
        "peek": [sm.peek(state, 500) for state in (READY, DELAYED, IN_FLIGHT, DEAD)],
        "scan": sm.scan(0, 10_000),
        "scan_after": sm.scan(max(seqs) // 2 if seqs else 0, 7),
        "stats": sm.stats(100, 10_000),
    }


class Twins:
    """The same commands to a partition of rows and one of runs."""

    def __init__(self, make_store, policy=POLICY):
        self.rows = QueueHarness(make_store("rows"), policy=policy)
        self.runs = QueueHarness(make_store("runs"), policy=policy, runs=True)
        self.seqs: set[int] = set()
        self.leased: list[tuple[int, int]] = []

    def both(self, name, *args, **kwargs):
        """Apply a command to both partitions; their answer (the same)."""
        answers = [normal(getattr(h, name)(*args, **kwargs)) for h in (self.rows, self.runs)]
        assert answers[0] == answers[1], (name, args, kwargs)
        return answers[0]

    def advance(self, ms: int) -> None:
        self.rows.advance(ms)
        self.runs.advance(ms)

    def check(self) -> None:
        assert reads(self.rows, self.seqs) == reads(self.runs, self.seqs)
        self.runs.check_invariants()


def random_step(twins: Twins, rng: random.Random) -> None:
    op = rng.choices(["enqueue", "lease", "ack", "nack", "extend", "delete", "change", "tick", "dead_remove"],
                     [6, 5, 5, 1, 1, 1, 1, 2, 1])[0]
    if op == "enqueue":
        group = rng.choice([b"", b"g1", b"g2"])
        items = []
        for n in range(rng.randrange(1, 40)):
            delayed = rng.random() < 0.1
            keyed = rng.random() < 0.05
            items.append(item(b"v%d" % rng.randrange(10**6) * rng.randrange(1, 4), priority=rng.choice([0, 1, 2, -3]),
                              group=group if rng.random() < 0.9 else b"g3",
                              deliver_at_ms=twins.rows.now_ms + rng.randrange(1, 500) if delayed else 0,
                              key=b"k%d" % rng.randrange(50) if keyed else b""))
        answer = twins.both("enqueue", *items)
        twins.seqs.update(seq for seq, _ in answer[1])
    elif op == "lease":
        answer = twins.both("lease", rng.randrange(1, 60), rng.randrange(50, 800),
                            rng.choice([1 << 20, rng.randrange(1, 200)]))
        twins.leased += [(seq, decode_message(raw).delivery_count) for seq, raw in answer]
    elif op == "ack" and twins.leased:
        picked = rng.sample(twins.leased, min(len(twins.leased), rng.randrange(1, 50)))
        picked = [(seq, count if rng.random() < 0.95 else count + 1) for seq, count in picked]
        if rng.random() < 0.1:
            picked.append((rng.randrange(1, 10**5), 1))  # unknown
        if rng.random() < 0.05 and picked:
            picked.append(picked[0])  # named twice
        twins.both("ack", *picked)
    elif op == "nack" and twins.leased:
        seq, count = rng.choice(twins.leased)
        twins.both("nack", seq, count, rng.choice([0, 100, queue_commands.BACKOFF]), b"no")
    elif op == "extend" and twins.leased:
        seq, count = rng.choice(twins.leased)
        twins.both("extend", seq, count, rng.randrange(100, 900))
    elif op == "delete" and twins.seqs:
        twins.both("delete", *rng.sample(sorted(twins.seqs), min(3, len(twins.seqs))))
    elif op == "change" and twins.seqs:
        seq = rng.choice(sorted(twins.seqs))
        if rng.random() < 0.5:
            twins.both("change", seq, priority=rng.choice([0, 1, 2, 5]))
        else:
            twins.both("change", seq, deliver_at_ms=twins.rows.now_ms + rng.choice([-5, 0, 200]))
    elif op == "tick":
        twins.advance(rng.randrange(1, 700))
        twins.both("tick")
    elif op == "dead_remove" and twins.seqs:
        twins.both("dead_remove", *rng.sample(sorted(twins.seqs), min(5, len(twins.seqs))))


@pytest.fixture(params=["long runs", "short runs"])
def run_bounds(request, monkeypatch):
    """Runs as the broker cuts them, and cut short (a few messages, a few hundred bytes) so that batches split
    into several runs and leftover rows."""
    if request.param == "short runs":
        monkeypatch.setattr(runs, "RUN_MESSAGES_MAX", 6)
        monkeypatch.setattr(runs, "RUN_ROW_BYTES_MAX", 400)


@pytest.mark.parametrize("seed", range(12))
def test_runs_answer_and_read_as_rows_do(seed, run_bounds):
    rng = random.Random(seed)
    twins = Twins(lambda name: MemoryStore(QueueStateMachine.TABLES),
                  POLICY._replace(max_deliveries=rng.choice([0, 2, 5])))
    for _ in range(100):
        random_step(twins, rng)
        twins.check()


def test_runs_on_lmdb_answer_as_rows_do(tmp_path):
    rng = random.Random(7)
    stores = []

    def make(name):
        stores.append(LmdbStore(str(tmp_path / name), QueueStateMachine.TABLES, 1 << 22))
        return stores[-1]

    twins = Twins(make)
    for _ in range(120):
        random_step(twins, rng)
        twins.check()
    for store in stores:
        store.close()


def test_a_batch_of_plain_messages_is_stored_as_runs_and_leased_and_acked_in_place():
    harness = QueueHarness(MemoryStore(QueueStateMachine.TABLES), runs=True)
    seqs = harness.put(*[b"m%d" % i for i in range(10)], priority=1)
    tables = harness.dump()
    assert len(tables[runs.RUNS]) == 1 and not tables["messages"] and not tables["locators"]
    leased = harness.lease(6)
    assert [m.seq for m in leased] == seqs[:6]
    assert [m.message.state for m in leased] == [IN_FLIGHT] * 6
    assert harness.ack(*[(m.seq, 1) for m in leased]) == [None] * 6
    tables = harness.dump()
    assert len(tables[runs.RUNS]) == 1 and not tables["messages"], "a lease and an ack keep the run"
    harness.ack(*[(m.seq, 1) for m in harness.lease(10)])
    assert not any(harness.dump()[table] for table in runs.RUN_TABLES), "the last ack drops the run and its batch"
    harness.check_invariants()


def test_a_nack_opens_the_run_into_rows():
    harness = QueueHarness(MemoryStore(QueueStateMachine.TABLES), runs=True)
    seqs = harness.put(*[b"m%d" % i for i in range(8)])
    leased = harness.lease(3)
    assert harness.nack(seqs[1], 1, 0) == [None]
    tables = harness.dump()
    assert not tables[runs.RUNS] and len(tables["messages"]) == 8
    harness.check_invariants()
    assert [m.seq for m in harness.lease(10)] == [seqs[1]] + seqs[3:]
    assert harness.ack((leased[0].seq, 1)) == [None]


def test_an_expired_lease_of_a_run_retries_its_messages():
    harness = QueueHarness(MemoryStore(QueueStateMachine.TABLES), runs=True)
    seqs = harness.put(*[b"m%d" % i for i in range(5)])
    leased = harness.lease(5, visibility_ms=100)
    harness.ack((leased[0].seq, 1))
    harness.advance(101)
    harness.tick()
    again = harness.lease(10)
    assert [(m.seq, m.message.delivery_count) for m in again] == [(seq, 2) for seq in seqs[1:]]
    harness.check_invariants()


def test_a_large_class_is_cut_into_runs_and_leased_across_them_in_order(monkeypatch):
    monkeypatch.setattr(runs, "RUN_MESSAGES_MAX", 4)
    harness = QueueHarness(MemoryStore(QueueStateMachine.TABLES), runs=True)
    seqs = harness.put(*[b"m%d" % i for i in range(10)], priority=2)
    tables = harness.dump()
    assert len(tables[runs.RUNS]) == 2 and len(tables["messages"]) == 2  # 4 + 4 in runs, the last 2 as rows
    assert [m.seq for m in harness.lease(7)] == seqs[:7]
    assert [m.seq for m in harness.lease(7)] == seqs[7:]
    harness.check_invariants()


def test_an_ack_of_a_run_message_at_the_wrong_delivery_is_refused_alone():
    harness = QueueHarness(MemoryStore(QueueStateMachine.TABLES), runs=True)
    seqs = harness.put(*[b"m%d" % i for i in range(4)])
    harness.lease(4)
    answers = harness.ack((seqs[0], 1), (seqs[1], 2), (seqs[2], 1))
    assert answers[0] is None and answers[2] is None
    assert isinstance(answers[1], errors.LeaseLost)
    assert harness.sm.counts() == (0, 0, 2, 0)


class CountingBatches:
    """A transaction's view of `run_batches` (a sorted dict) that counts the seeks a finder makes."""

    def __init__(self, entries: dict[bytes, bytes]):
        self.entries, self.seeks = entries, 0

    def first(self, table):
        return min(self.entries.items()) if self.entries else None

    def items(self, table, start: bytes):
        self.seeks += 1
        return iter(sorted((k, v) for k, v in self.entries.items() if k >= start))


def test_the_finder_answers_seqs_between_batches_without_reading_again():
    key = b"r" * runs.RUN_KEY_BYTES
    txn = CountingBatches(dict([runs.batch_entry(20, 23, [key], bytearray(4))]))  # seqs 20..23, all in run 0
    finder = runs.RunFinder(txn)
    assert [finder.run_key(seq) for seq in range(10, 20)] == [None] * 10  # no batch holds 10..19: one seek
    assert txn.seeks == 1
    assert [finder.run_key(seq) for seq in range(20, 24)] == [key] * 4  # the batch that seek read
    assert txn.seeks == 1
    assert [finder.run_key(seq) for seq in (24, 30, 99)] == [None] * 3  # past the last batch: one seek
    assert txn.seeks == 2
    txn.entries.update([runs.batch_entry(40, 41, [key], bytearray(2))])
    finder.added()  # a batch written since: the span past the last batch is no longer known to be empty
    assert finder.run_key(40) == key and finder.run_key(30) is None
