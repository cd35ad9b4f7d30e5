"""Reads of a queue partition's tables shared by the state machine's commands and its readers."""
from __future__ import annotations

import heapq
import itertools

from raftbus.broker.queues.state import runs
from raftbus.broker.queues.state.records import (
    IN_FLIGHT,
    StoredMessage,
    decode_message,
    read_ready_value,
    seq_key,
    seq_of,
    time_of,
    time_key,
)
from raftbus.broker.queues.state.tables import (
    DELAYED_T,
    IN_FLIGHT_T,
    LEAVES,
    LOCATORS,
    MESSAGES,
    META,
    READY_T,
    SEQ,
    STATE,
    STATE_KEY,
    Due,
    QueueState,
)


def state_in(txn) -> QueueState:
    raw = txn.get(META, STATE_KEY)
    return QueueState() if raw is None else QueueState(*STATE.unpack(raw))


def due_in(txn, ready: int, fair: bool) -> Due:
    delivery, expiry = (time_of(bytes(found[0])) if found else None
                        for found in (txn.first(DELAYED_T), txn.first(IN_FLIGHT_T)))
    deliverable = txn.first(LEAVES) is not None if fair else ready > 0
    return Due(delivery, expiry, deliverable)


def next_delivery_in(txn) -> int | None:
    """When the earliest delayed message becomes ready (None: no message is delayed)."""
    found = txn.first(DELAYED_T)
    return time_of(bytes(found[0])) if found else None


def next_expiry_after(txn, after_ms: int) -> int | None:
    """The earliest lease deadline after after_ms (None: none)."""
    for key, _ in txn.items(IN_FLIGHT_T, time_key(after_ms + 1)):
        return time_of(bytes(key))
    return None


def stored_message(txn, seq: int) -> StoredMessage | None:
    """The message of a seq stored as a row, found through its locator (commands: a message inside a run is
    opened into a row first, moves.py)."""
    key = txn.get(LOCATORS, seq_key(seq))
    return None if key is None else decode_message(txn.get(MESSAGES, key))


def any_message(txn, seq: int) -> StoredMessage | None:
    """The message of a seq, stored as a row or inside a run (readers)."""
    m = stored_message(txn, seq)
    if m is None:
        row = runs.run_message(txn, seq)
        m = None if row is None else decode_message(row)
    return m


def messages_after(txn, after_seq: int, max_messages: int) -> list[tuple[int, StoredMessage]]:
    """Up to max_messages messages of any state with a seq above `after_seq`, in seq order (a full scan in pages):
    the rows' locators and the runs' live messages, merged."""
    rows = ((SEQ.unpack(bytes(key))[0], bytes(row_key), True)
            for key, row_key in txn.items(LOCATORS, seq_key(after_seq + 1)))
    in_runs = ((seq, row, False) for seq, row in runs.live_in_runs(txn, after_seq))
    found = []
    for seq, where, is_row in heapq.merge(rows, in_runs):
        found.append((seq, decode_message(txn.get(MESSAGES, where) if is_row else where)))
        if len(found) >= max_messages:
            break
    return found


def ready_messages(txn, max_messages: int) -> list[tuple[int, StoredMessage]]:
    """The first max_messages ready messages in delivery order: ready rows and the runs' ready messages, merged."""
    rows = ((bytes(key), seq_of(bytes(key)), None) for key, _ in txn.items(READY_T))
    found = []
    for key, seq, raw in heapq.merge(rows, runs.ready_in_runs(txn)):
        found.append((seq, decode_message(raw) if raw is not None else stored_message(txn, seq)))
        if len(found) >= max_messages:
            break
    return [(seq, m) for seq, m in found if m is not None]


def in_flight_entry(txn, key: bytes, value: bytes, rows_only: bool = False) -> list[tuple[int, StoredMessage]]:
    """The messages of an in-flight index entry that are still in flight under that deadline. The entry outlives
    the acks of its messages (the in-flight index is cleaned when the deadline comes), so most of its seqs usually
    have no locator left: the locators are looked up through one cursor, rows only for those found (and, for the
    seqs without one, the runs: readers see messages inside runs). With `rows_only` the runs are not looked into:
    the caller opened the runs holding this entry's live leases first (`MessageMoves.open_runs_in_flight`), so
    no message left inside a run is in flight under this deadline."""
    deadline = time_of(key)
    size = SEQ.size
    seq_keys = [value[i:i + size] for i in range(0, len(value), size)]
    row_keys = txn.get_many(LOCATORS, seq_keys)
    finder = None if rows_only else runs.RunFinder(txn)
    in_runs = finder is not None and finder.any
    found = [bytes(row_key) for row_key in row_keys if row_key is not None]
    if not found and not in_runs:
        return []
    stored = iter(txn.get_many(MESSAGES, found))
    live, loaded = [], {}
    for seq_key, row_key in zip(seq_keys, row_keys):
        if row_key is not None:
            raw = next(stored)
        elif in_runs:
            raw = runs.run_message(txn, SEQ.unpack(seq_key)[0], finder, loaded)
        else:
            continue
        if raw is None:
            continue
        m = decode_message(raw)
        if m.state == IN_FLIGHT and m.deadline_ms == deadline:
            live.append((SEQ.unpack(seq_key)[0], m))
    return live


def peek_in_flight(txn, max_messages: int) -> list[tuple[int, StoredMessage]]:
    found: list[tuple[int, StoredMessage]] = []
    for key, value in txn.items(IN_FLIGHT_T):
        found += in_flight_entry(txn, bytes(key), bytes(value))
        if len(found) >= max_messages:
            break
    return found[:max_messages]


def oldest_in_buckets(txn, prefix: bytes, buckets_max: int) -> int | None:
    """The earliest enqueue time among ready messages under `prefix`: within a bucket (same group path and
    priority) arrival order is seq order, so each bucket's first message is its oldest; jump bucket to bucket."""
    oldest, start = None, prefix
    for _ in range(buckets_max):
        found = next(txn.items(READY_T, start or None), None)
        if found is None or not bytes(found[0]).startswith(prefix):
            break
        key = bytes(found[0])
        enqueued_ms, _ = read_ready_value(found[1])
        oldest = enqueued_ms if oldest is None else min(oldest, enqueued_ms)
        start = key[:-8] + b"\xff" * 9
    start = prefix  # the runs' ready messages (priority ordering only), bucket by bucket the same way
    for _ in range(buckets_max if not prefix else 0):
        found = next(txn.items(runs.RUN_READY, start or None), None)
        if found is None:
            break
        key = bytes(found[0])
        enqueued_ms, _ = read_ready_value(bytes(found[1])[runs.RUN_KEY_BYTES:])
        oldest = enqueued_ms if oldest is None else min(oldest, enqueued_ms)
        start = key[:-8] + b"\xff" * 9
    return oldest


def oldest_per_group(txn, wanted: set[bytes], scan_max: int) -> dict[bytes, int]:
    """Each wanted group's earliest enqueue time among the first scan_max ready messages."""
    oldest: dict[bytes, int] = {}
    if not wanted:
        return oldest
    rows = ((bytes(key), 1, bytes(value)) for key, value in txn.items(READY_T))
    in_runs = ((key, count, value) for key, count, value in runs.ready_run_entries(txn))
    seen = 0
    for _, count, value in heapq.merge(rows, in_runs):  # a run's entry stands for its ready messages
        if seen >= scan_max:
            break
        seen += count
        enqueued_ms, group = read_ready_value(value)
        if group in wanted and enqueued_ms < oldest.get(group, enqueued_ms + 1):
            oldest[group] = enqueued_ms
    return oldest
