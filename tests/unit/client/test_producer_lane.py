"""Goal: the idempotent-producer rules of one partition (client/producer_lane.py) answer every event with the
right actions: tables of "events in -> actions out", one row per rule or interleaving, plus the lane's purity."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from raftbus.client import producer_lane
from raftbus.client.errors import (
    NotLeader,
    OutOfOrderSequence,
    RequestTimedOut,
    Unavailable,
    UnknownPartition,
    UnknownProducerId,
)
from raftbus.client.producer_lane import RENEW, Complete, Fail, LaneBatch, PartitionLane

IDS = ("P1", "P2", "P3", "P4")  # producer ids in the order the lane is given them


class Batch(LaneBatch):
    __slots__ = ("name", "count", "due_s")

    def __init__(self, name: str, count: int, created_s: float, due_s: float):
        super().__init__(created_s)
        self.name, self.count, self.due_s = name, count, due_s

    def record_count(self) -> int:
        return self.count


# ---------------------------------------------------------------------- events
def queue(name, count=1, created_s=0.0, due_s=0.0):
    """A new batch of `count` records joins the queue (created at `created_s`, due to send at `due_s`)."""
    return ("queue", name, count, created_s, due_s)


def take(now_s=0.0):
    return ("take", now_s)


def ack(name, answer="ok", attempt=None):
    """The broker acknowledged `name`'s current send (or an earlier one, `attempt`) with `answer`."""
    return ("ack", name, answer, attempt)


def refuse(name, error=NotLeader, now_s=0.0, delay_s=0.1, attempt=None):
    """`name`'s send failed with `error`; `delay_s` is what the router allows (None: final)."""
    return ("refuse", name, error, now_s, delay_s, attempt)


def renew(producer_id):
    return ("renew", producer_id)


def abandon():
    return ("abandon",)


# ---------------------------------------------------------------------- the driver
class Driver:
    def __init__(self, in_flight_max=1, delivery_timeout_s=10.0, replayed=False, auto_renew=True):
        self.lane = PartitionLane("P1", in_flight_max=in_flight_max, delivery_timeout_s=delivery_timeout_s,
                                  replayed=replayed)
        self.batches: dict[str, Batch] = {}
        self.ids = iter(IDS[1:])
        self.auto_renew = auto_renew

    def apply(self, event) -> list[str]:
        kind, *args = event
        lane = self.lane
        if kind == "queue":
            name, count, created_s, due_s = args
            self.batches[name] = batch = Batch(name, count, created_s, due_s)
            lane.queue.append(batch)
            return []
        if kind == "take":
            sent, wake_s = lane.take(args[0], lambda batch, queued: batch.due_s)
            out = [f"send {b.name} {b.producer_id}#{b.sequence}" + (f" try {b.attempts}" if b.attempts > 1 else "")
                   for b in sent]
            return out + ([f"wake {wake_s}"] if wake_s is not None else [])
        if kind == "ack":
            name, answer, attempt = args
            batch = self.batches[name]
            return self.render(lane.acked(batch, batch.attempts if attempt is None else attempt, answer))
        if kind == "refuse":
            name, error, now_s, delay_s, attempt = args
            batch = self.batches[name]
            return self.render(lane.refused(batch, batch.attempts if attempt is None else attempt, error("x"),
                                            now_s, delay_s))
        if kind == "renew":
            lane.renew(args[0])
            return []
        if kind == "abandon":
            return self.render(lane.abandon(RequestTimedOut("closed")))
        raise AssertionError(kind)

    def render(self, actions) -> list[str]:
        out = []
        for action in actions:
            if action is RENEW:
                if self.auto_renew:
                    fresh = next(self.ids)
                    self.lane.renew(fresh)
                    out.append(f"renew {fresh}")
                else:
                    out.append("renew")
            elif type(action) is Complete:
                out.append(f"complete {action.batch.name} {'written' if action.answer is None else action.answer}")
            else:
                assert type(action) is Fail
                out.append(f"fail {action.batch.name} {type(action.error).__name__}"
                           + (" timed out" if action.timed_out else ""))
        return out


def run(script, **options) -> None:
    driver = Driver(**options)
    for step, (event, expected) in enumerate(script):
        assert driver.apply(event) == expected, f"step {step}: {event}"


# ---------------------------------------------------------------------- the rows: (goal, options, script)
ROWS = [
    ("a batch gets the partition's next sequence when first sent, under the lane's producer id",
     {}, [
         (queue("a", 2), []), (queue("b", 3), []),
         (take(), ["send a P1#0"]),
         (take(), []),  # one in flight
         (ack("a"), ["complete a ok"]),
         (take(), ["send b P1#2"]),
         (ack("b"), ["complete b ok"]),
     ]),
    ("a batch not due yet waits, and take says when to look again",
     {}, [
         (queue("a", 1, due_s=5.0), []),
         (take(1.0), ["wake 5.0"]),
         (take(5.0), ["send a P1#0"]),
     ]),
    ("up to in_flight_max batches are in flight, answered in any order",
     {"in_flight_max": 2}, [
         (queue("a", 2), []), (queue("b", 3), []), (queue("c", 1), []),
         (take(), ["send a P1#0", "send b P1#2"]),
         (ack("b"), ["complete b ok"]),
         (take(), ["send c P1#5"]),
         (ack("a"), ["complete a ok"]),
         (ack("c"), ["complete c ok"]),
     ]),
    ("a refused batch goes again after its delay with the same producer id and sequence",
     {}, [
         (queue("p", 4), []), (take(), ["send p P1#0"]), (ack("p"), ["complete p ok"]),
         (queue("a", 2), []), (take(), ["send a P1#4"]),
         (refuse("a", NotLeader, now_s=1.0, delay_s=0.5), []),
         (take(1.2), ["wake 1.5"]),
         (take(1.5), ["send a P1#4 try 2"]),
         (ack("a"), ["complete a ok"]),
     ]),
    ("after a refusal nothing new goes until the in-flight batches answered; then the refused ones go first, "
     "in sequence order, ahead of the queued",
     {"in_flight_max": 3}, [
         (queue("a"), []), (queue("b"), []), (queue("c"), []), (queue("d"), []),
         (take(), ["send a P1#0", "send b P1#1", "send c P1#2"]),
         (refuse("c", OutOfOrderSequence, delay_s=0.0), []),
         (refuse("b", NotLeader, delay_s=0.0), []),
         (take(), []),
         (ack("a"), ["complete a ok"]),
         (take(), ["send b P1#1 try 2", "send c P1#2 try 2", "send d P1#3"]),
         (ack("b"), ["complete b ok"]), (ack("c"), ["complete c ok"]), (ack("d"), ["complete d ok"]),
     ]),
    ("OUT_OF_ORDER_SEQUENCE after a leader change: the old leader refuses the first batch, the new one the "
     "next two (a gap); all three go again in order under the same id and sequences",
     {"in_flight_max": 3}, [
         (queue("p", 2), []), (take(), ["send p P1#0"]), (ack("p"), ["complete p ok"]),
         (queue("a", 2), []), (queue("b", 2), []), (queue("c", 2), []),
         (take(), ["send a P1#2", "send b P1#4", "send c P1#6"]),
         (refuse("b", OutOfOrderSequence, delay_s=0.0), []),
         (refuse("c", OutOfOrderSequence, delay_s=0.0), []),
         (refuse("a", NotLeader, delay_s=0.0), []),
         (take(), ["send a P1#2 try 2", "send b P1#4 try 2", "send c P1#6 try 2"]),
         (ack("a"), ["complete a ok"]), (ack("b"), ["complete b ok"]), (ack("c"), ["complete c ok"]),
     ]),
    ("a resent batch the broker already appended is answered as a duplicate: completed with the original "
     "offsets, nothing sent again",
     {}, [
         (queue("a", 3), []), (queue("b"), []), (take(), ["send a P1#0"]),
         (refuse("a", RequestTimedOut, delay_s=0.0), []),
         (take(), ["send a P1#0 try 2"]),
         (ack("a", answer="duplicate@0"), ["complete a duplicate@0"]),
         (take(), ["send b P1#3"]),
     ]),
    ("an answer to an earlier send of a batch sent again since, or to a batch no longer in flight, changes "
     "nothing",
     {}, [
         (queue("a", 2), []), (queue("b"), []), (take(), ["send a P1#0"]),
         (refuse("a", Unavailable, delay_s=0.0), []),
         (take(), ["send a P1#0 try 2"]),
         (ack("a", attempt=1), []),
         (refuse("a", Unavailable, attempt=1), []),
         (take(), []),  # still in flight
         (ack("a"), ["complete a ok"]),
         (ack("a"), []),
         (refuse("a", NotLeader), []),
         (take(), ["send b P1#2"]),
     ]),
    ("a final error fails the batch for good; the lane starts over under a fresh producer id from sequence 0",
     {}, [
         (queue("a", 2), []), (queue("b", 3), []), (take(), ["send a P1#0"]),
         (refuse("a", UnknownPartition, delay_s=None), ["fail a UnknownPartition", "renew P2"]),
         (take(), ["send b P2#0"]),
         (ack("b"), ["complete b ok"]),
     ]),
    ("a batch failing for good fails the refused batches behind it with its error (their outcome may be "
     "unknown), sends nothing new meanwhile, then starts over",
     {"in_flight_max": 3}, [
         (queue("a"), []), (queue("b"), []), (queue("c"), []), (queue("d", 2), []),
         (take(), ["send a P1#0", "send b P1#1", "send c P1#2"]),
         (refuse("b", NotLeader, delay_s=0.0), []),
         (refuse("a", UnknownPartition, delay_s=None), ["fail a UnknownPartition"]),
         (take(), []),
         (ack("c"), ["complete c ok", "fail b UnknownPartition", "renew P2"]),
         (take(), ["send d P2#0"]),
     ]),
    ("after a batch failed for good, nothing new goes while the others are in flight: the queued batch waits for "
     "the fresh producer id instead of following a sequence the partition may never see",
     {"in_flight_max": 2}, [
         (queue("a"), []), (queue("b"), []), (queue("c", 2), []), (take(), ["send a P1#0", "send b P1#1"]),
         (refuse("a", UnknownPartition, delay_s=None), ["fail a UnknownPartition"]),
         (take(), []),
         (refuse("b", OutOfOrderSequence, delay_s=0.0), ["fail b UnknownPartition", "renew P2"]),
         (take(), ["send c P2#0"]),
     ]),
    ("a resend that would land past the batch's delivery deadline fails it (timed out) with the last error",
     {"delivery_timeout_s": 1.0}, [
         (queue("a", created_s=0.0), []), (queue("b", created_s=0.9), []), (take(0.0), ["send a P1#0"]),
         (refuse("a", NotLeader, now_s=0.5, delay_s=0.2), []),
         (take(0.7), ["send a P1#0 try 2"]),
         (refuse("a", NotLeader, now_s=0.9, delay_s=0.1), ["fail a NotLeader timed out", "renew P2"]),
         (take(0.9), ["send b P2#0"]),
     ]),
    ("OUT_OF_ORDER_SEQUENCE on the first outstanding batch of a producer of its own is resent with its "
     "sequence until its deadline, then fails and the lane starts over",
     {"delivery_timeout_s": 1.0}, [
         (queue("p"), []), (take(), ["send p P1#0"]), (ack("p"), ["complete p ok"]),
         (queue("a"), []), (queue("b"), []), (take(), ["send a P1#1"]),
         (refuse("a", OutOfOrderSequence, now_s=0.1, delay_s=0.1), []),
         (take(0.2), ["send a P1#1 try 2"]),
         (refuse("a", OutOfOrderSequence, now_s=0.95, delay_s=0.1),
          ["fail a OutOfOrderSequence timed out", "renew P2"]),
         (take(0.95), ["send b P2#0"]),
     ]),
    ("UNKNOWN_PRODUCER_ID with 3 batches in flight after every earlier batch was acknowledged (the partition "
     "forgot the producer): all three start over under a fresh id from sequence 0, in order, none failing",
     {"in_flight_max": 3}, [
         (queue("p", 5), []), (take(), ["send p P1#0"]), (ack("p"), ["complete p ok"]),
         (queue("a", 2), []), (queue("b", 3), []), (queue("c", 1), []), (queue("d", 1), []),
         (take(), ["send a P1#5", "send b P1#7", "send c P1#10"]),
         (refuse("a", UnknownProducerId, delay_s=0.3), []),
         (refuse("c", UnknownProducerId, delay_s=0.3), []),
         (take(), []),
         (refuse("b", UnknownProducerId, delay_s=0.3), ["renew P2"]),
         (take(), ["send a P2#0 try 2", "send b P2#2 try 2", "send c P2#5 try 2"]),  # at once: nothing to wait for
         (ack("a"), ["complete a ok"]), (ack("b"), ["complete b ok"]), (ack("c"), ["complete c ok"]),
         (take(), ["send d P2#6"]),
     ]),
    ("UNKNOWN_PRODUCER_ID on a later batch behind one refused otherwise (a new leader saw the later batch "
     "first): both go again in order under the same id and sequences",
     {"in_flight_max": 2}, [
         (queue("a", 2), []), (queue("b", 2), []), (take(), ["send a P1#0", "send b P1#2"]),
         (refuse("b", UnknownProducerId, delay_s=0.0), []),
         (refuse("a", NotLeader, delay_s=0.0), []),
         (take(), ["send a P1#0 try 2", "send b P1#2 try 2"]),
         (ack("a"), ["complete a ok"]), (ack("b"), ["complete b ok"]),
     ]),
    ("UNKNOWN_PRODUCER_ID behind a batch that failed for good: the held one fails with that error and the "
     "lane starts over once",
     {"in_flight_max": 2}, [
         (queue("a"), []), (queue("b"), []), (queue("c"), []), (take(), ["send a P1#0", "send b P1#1"]),
         (refuse("b", UnknownProducerId, delay_s=0.0), []),
         (refuse("a", UnknownPartition, delay_s=None), ["fail a UnknownPartition", "fail b UnknownPartition",
                                                         "renew P2"]),
         (take(), ["send c P2#0"]),
     ]),
    ("nothing is sent between asking for a fresh producer id and getting it",
     {"auto_renew": False}, [
         (queue("a"), []), (queue("b"), []), (take(), ["send a P1#0"]),
         (refuse("a", UnknownPartition, delay_s=None), ["fail a UnknownPartition", "renew"]),
         (take(), []),
         (renew("P7"), []),
         (take(), ["send b P7#0"]),
     ]),
    ("a replayed producer id: OUT_OF_ORDER_SEQUENCE on the first outstanding batch means an earlier attempt "
     "wrote it (completed without offsets, even past its deadline); the next batch follows under the same id",
     {"replayed": True, "delivery_timeout_s": 1.0}, [
         (queue("a", 2), []), (queue("b", 2), []), (queue("c", 2), []),
         (take(), ["send a P1#0"]),
         (refuse("a", OutOfOrderSequence, now_s=5.0, delay_s=0.1), ["complete a written"]),
         (take(5.0), ["send b P1#2"]),
         (ack("b", answer="duplicate@40"), ["complete b duplicate@40"]),
         (take(5.0), ["send c P1#4"]),
         (ack("c", answer="appended@42"), ["complete c appended@42"]),
     ]),
    ("a replayed producer id: OUT_OF_ORDER_SEQUENCE behind an unanswered earlier batch is held; once that one "
     "is acknowledged it is the first outstanding and counts as written",
     {"replayed": True, "in_flight_max": 2}, [
         (queue("a"), []), (queue("b"), []), (take(), ["send a P1#0", "send b P1#1"]),
         (refuse("b", OutOfOrderSequence, delay_s=0.0), []),
         (ack("a"), ["complete a ok", "complete b written"]),
     ]),
    ("a replayed producer id: after a restart under a fresh id, OUT_OF_ORDER_SEQUENCE is a plain retriable "
     "refusal (no earlier attempt wrote under that id)",
     {"replayed": True}, [
         (queue("p"), []), (take(), ["send p P1#0"]), (ack("p"), ["complete p ok"]),
         (queue("a"), []), (take(), ["send a P1#1"]),
         (refuse("a", UnknownProducerId, delay_s=0.0), ["renew P2"]),
         (take(), ["send a P2#0 try 2"]),
         (refuse("a", OutOfOrderSequence, delay_s=0.0), []),
         (take(), ["send a P2#0 try 3"]),
         (ack("a"), ["complete a ok"]),
     ]),
    ("abandoning fails the queued and held batches and leaves the ones in flight to their answers",
     {"in_flight_max": 2}, [
         (queue("a"), []), (queue("b"), []), (queue("c"), []), (take(), ["send a P1#0", "send b P1#1"]),
         (refuse("b", NotLeader, delay_s=0.0), []),
         (abandon(), ["fail b RequestTimedOut", "fail c RequestTimedOut"]),
         (ack("a"), ["complete a ok"]),
         (take(), []),
     ]),
]


@pytest.mark.parametrize("goal, options, script", ROWS, ids=[row[0][:60] for row in ROWS])
def test_lane_rules(goal, options, script):
    run(script, **options)


def test_idle_means_nothing_in_flight_held_or_renewing():
    """Goal: `idle` (what the sync Producer's send-at-once path asks) is false while anything is outstanding."""
    driver = Driver(auto_renew=False)
    lane = driver.lane
    assert lane.idle()
    driver.apply(queue("a"))
    driver.apply(take())
    assert not lane.idle()
    driver.apply(refuse("a", UnknownPartition, delay_s=None))
    assert not lane.idle()  # waiting for a fresh id
    driver.apply(renew("P2"))
    assert lane.idle() and lane.producer_id == "P2" and lane.epoch == 1 and lane.next_sequence == 0


def test_the_lane_module_imports_no_io_threads_clock_or_randomness():
    """Goal: the core stays sans-I/O: besides the error types it imports only collections and typing."""
    tree = ast.parse(Path(producer_lane.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "collections", "collections.abc", "typing", "raftbus.client.errors"}
