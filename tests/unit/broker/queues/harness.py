"""A queue state machine driven by commands with a hand-moved clock, plus an invariant checker (unit tests only)."""
from __future__ import annotations

import itertools
import struct

from raftbus.broker.queues import commands as queue_commands
from raftbus.broker.queues.state import runs
from raftbus.broker.queues.state import tables as q
from raftbus.broker.queues.state.machine import QueueStateMachine
from raftbus.broker.queues.state.fair import group_path
from raftbus.broker.queues.state.records import (
    DEAD,
    DELAYED,
    IN_FLIGHT,
    READY,
    decode_message,
    read_ready_value,
    row_key,
    seq_of,
    time_of,
)

POLICY = queue_commands.QueuePolicy(max_deliveries=5, backoff_base_ms=0, backoff_max_ms=0, max_in_flight_per_group=0,
                        idempotency_window_ms=10_000, producer_idle_ms=100_000, due_per_command_max=1000)


def item(value: bytes, *, priority=0, group=b"", deliver_at_ms=0, key=b"", origin_id=0, delivery_count=0,
         enqueued_ms=0, last_error=b"") -> queue_commands.EnqueueItem:
    """An enqueue item whose record is just the value (records are opaque to the broker)."""
    return queue_commands.EnqueueItem(priority, deliver_at_ms, delivery_count, enqueued_ms, origin_id, group, key, last_error,
                          value)


class QueueHarness:
    """A QueueStateMachine, its Raft index counter and a clock tests move by hand."""

    def __init__(self, store, ordering="priority", policy=POLICY, now_ms=1_000, runs=False):
        self.store = store
        self.runs = runs  # enqueue as ENQUEUE_RUNS (state/runs.py)
        self.ordering = ordering
        self.sm = QueueStateMachine(store, ordering)
        self.index = self.sm.applied_index()
        self.now_ms = now_ms
        self.policy = policy

    def apply(self, command: bytes):
        self.index += 1
        return self.sm.apply(self.index, command)

    def advance(self, ms: int) -> None:
        self.now_ms += ms

    # ------------------------------------------------------------------ commands
    def enqueue(self, *items, producer_id=b"", base_sequence=0):
        return self.apply(queue_commands.encode_enqueue(self.now_ms, self.policy, list(items), producer_id=producer_id,
                                            base_sequence=base_sequence, runs=self.runs))

    def put(self, *values, **fields) -> list[int]:
        """Enqueue one message per value with the same fields; returns their seqs."""
        result = self.enqueue(*(item(v, **fields) for v in values))
        return [m.seq for m in result.messages]

    def lease(self, max_messages=100, visibility_ms=1_000, max_bytes=1 << 20):
        return self.apply(queue_commands.encode_lease(self.now_ms, self.policy, max_messages, max_bytes, visibility_ms))

    def lease_values(self, max_messages=100, visibility_ms=1_000) -> list[bytes]:
        return [leased.message.record for leased in self.lease(max_messages, visibility_ms)]

    def ack(self, *leases, settler_id=b"", sequence=0):
        return self.apply(queue_commands.encode_ack(self.now_ms, self.policy, list(leases), settler_id=settler_id,
                                        sequence=sequence))

    def nack(self, seq, delivery_count, delay_ms=queue_commands.BACKOFF, reason=b"", settler_id=b"", sequence=0):
        return self.apply(queue_commands.encode_nack(self.now_ms, self.policy, [queue_commands.Nack(seq, delivery_count, delay_ms, reason)],
                                         settler_id=settler_id, sequence=sequence))

    def extend(self, seq, delivery_count, visibility_ms):
        return self.apply(queue_commands.encode_extend(self.now_ms, self.policy, [(seq, delivery_count, visibility_ms)]))

    def delete(self, *seqs):
        return self.apply(queue_commands.encode_delete(self.now_ms, self.policy, list(seqs)))

    def change(self, seq, priority=None, deliver_at_ms=None):
        return self.apply(queue_commands.encode_change(self.now_ms, self.policy, seq, priority, deliver_at_ms))

    def tick(self):
        return self.apply(queue_commands.encode_tick(self.now_ms, self.policy))

    def dead_remove(self, *seqs):
        return self.apply(queue_commands.encode_dead_remove(self.now_ms, self.policy, list(seqs)))

    # ------------------------------------------------------------------ views
    def dump(self) -> dict:
        """Every table but meta, as plain dicts (to prove a refusal changed nothing)."""
        with self.store.read() as txn:
            return {t: {bytes(k): bytes(v) for k, v in txn.items(t)} for t in QueueStateMachine.TABLES
                    if t != q.META}

    def check_invariants(self) -> None:
        """Each message stored under its delivery-order key and found by its locator, indexed exactly once under
        its state; counters match the indexes; fair leaves are right."""
        tables = self.dump()
        messages = {seq_of(k): decode_message(v) for k, v in tables[q.MESSAGES].items()}
        with self.store.read() as txn:
            in_runs = {seq: decode_message(row) for seq, row in runs.live_in_runs(txn, 0)}
            ready_in_runs = {seq for _, seq, _ in runs.ready_in_runs(txn)}
        assert not set(in_runs) & set(messages), "a message both in a run and a row"
        assert {seq_of(k): k for k in tables[q.MESSAGES]} == {seq_of(k): v for k, v in tables[q.LOCATORS].items()}
        for key, m in zip(tables[q.MESSAGES], messages.values()):
            path = group_path(m.group) if self.ordering == "fair" else None
            assert key == row_key(seq_of(key), m.priority, path), f"seq {seq_of(key)} stored out of place"
        indexed = {}
        for state, table in ((READY, q.READY_T), (DELAYED, q.DELAYED_T), (DEAD, q.DEAD_T)):
            for key in tables[table]:
                seq = seq_of(key)
                assert seq not in indexed, f"seq {seq} indexed twice"
                indexed[seq] = state
                m = messages[seq]
                assert m.state == state, (seq, m.state, state)
                if state == DELAYED:
                    assert time_of(key) == m.available_ms
        # The in-flight index is lazy: each leased message is listed under its deadline, stale seqs may remain.
        listed = {(seq, time_of(key)) for key, value in tables[q.IN_FLIGHT_T].items()
                  for (seq,) in struct.iter_unpack(">Q", value)}
        for seq, m in in_runs.items():
            assert m.state in (READY, IN_FLIGHT)
            assert (m.state == READY) == (seq in ready_in_runs), f"seq {seq} of a run not where its state says"
            indexed[seq] = m.state
        messages.update(in_runs)
        for seq, m in messages.items():
            if m.state == IN_FLIGHT:
                assert (seq, m.deadline_ms) in listed, f"leased seq {seq} missing from the in-flight index"
                assert seq not in indexed or seq in in_runs
                indexed[seq] = IN_FLIGHT
        assert set(indexed) == set(messages)
        for key, value in tables[q.READY_T].items():
            m = messages[seq_of(key)]
            assert read_ready_value(value) == (m.enqueued_ms, m.group)
        counts = self.sm.counts()
        assert counts == tuple(sum(1 for m in messages.values() if m.state == s)
                               for s in (READY, DELAYED, IN_FLIGHT, DEAD)), counts
        per_group = {}
        for m in messages.values():
            per_group.setdefault(m.group, [0, 0, 0, 0])[m.state - 1] += 1
        stored = {k[1:]: list(q.GROUP.unpack(v)) for k, v in tables[q.GROUPS].items()}
        assert stored == per_group
        if self.ordering == "fair":
            limit = self.policy.max_in_flight_per_group
            wanted = {group_path(g) for g, c in per_group.items() if c[0] and (not limit or c[2] < limit)}
            assert set(tables[q.LEAVES]) == wanted


def drain(harness: QueueHarness, batch: int = 1) -> list[bytes]:
    """Lease and ack everything deliverable now, `batch` at a time; returns the values in delivery order."""
    order = []
    for _ in itertools.count():
        leased = harness.lease(batch)
        if not leased:
            return order
        order += [leased_one.message.record for leased_one in leased]
        harness.ack(*[(leased_one.seq, leased_one.message.delivery_count) for leased_one in leased])
