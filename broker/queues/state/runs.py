"""Runs: the messages of one enqueue batch that share a priority, stored as one value instead of one row each.

A queue partition with priority ordering stores a message either as a row (`messages`, `locators` and an index
entry: records.py) or inside a run; never both. A run is written by an enqueue command that asks for runs (op
ENQUEUE_RUNS, stamped by the leader) for each priority class of the batch whose messages are plain (no
idempotency key, no origin, ready at once, no delivery history or error) and share a group and an enqueue time,
cut into runs of at most RUN_MESSAGES_MAX messages and RUN_ROW_BYTES_MAX bytes (every lease and ack of a run
reads it whole); a piece of fewer than RUN_MESSAGES_MIN messages is stored as rows. Only two things happen to a
message inside its run, each a slice of the run's state however many messages it names:
    lease  the next ready messages of the run (they are always its tail: `ready_from` onwards) go in flight
    ack    in-flight messages at their delivery count are settled (gone)
Anything else that touches a message of a run (a nack, an extend, a delete, a change, a get, the expiry of its
lease) first *opens* the run: its live messages become rows exactly as if they had been stored as rows all
along, and the run is gone. So every other command keeps working on rows, unchanged.

Tables (keys are row keys, records.row_key: priority|seq):
    runs         run key (its first message's row key) -> n >I | group_len >H | seqs >Q * n | row ends >I * n |
                 the rows, each laid out as records.encode_message with the state it was enqueued with
    run_state    run key -> ready_from >I | live >I | states >B * n | delivery counts >I * n | deadlines >q * n
                 (states: READY, IN_FLIGHT, or GONE once acked)
    run_ready    the row key of the run's first ready message -> run key | enqueued_ms >q | group
                 (merged with `ready` by a lease: together they are the delivery order)
    run_batches  seq key of the batch's last seq -> first seq >Q | runs >B | runs not gone yet >B | run keys |
                 run number per seq of the batch (>B, NOT_IN_RUN for a seq stored as a row): how a seq finds its
                 run (a run that is gone keeps its number; the entry goes with the batch's last run)
Pure byte layouts and the reads and writes of these tables over a transaction; counters and the other indexes
are the caller's (work.py, moves.py).
"""
from __future__ import annotations

import struct
from array import array
from bisect import bisect_left

from raftbus.broker.queues.state.records import (
    _GROUP_AT,
    _LEASE_HEAD,
    _LEASE_READ,
    IN_FLIGHT,
    READY,
    ready_value,
    row_key,
)

RUNS, RUN_STATE, RUN_READY, RUN_BATCHES = "runs", "run_state", "run_ready", "run_batches"
RUN_TABLES = (RUNS, RUN_STATE, RUN_READY, RUN_BATCHES)
RUN_MESSAGES_MIN = 4   # a priority class of fewer messages is stored as rows
RUN_MESSAGES_MAX = 1024  # a larger class is cut into runs of at most this many messages ...
RUN_ROW_BYTES_MAX = 1 << 20  # ... and of at most this many bytes of rows (one more message when the first is larger)
RUNS_PER_BATCH_MAX = 254
NOT_IN_RUN = 255
GONE = 0

_RUN_HEAD = struct.Struct(">IH")
_STATE_HEAD = struct.Struct(">II")
_BATCH_HEAD = struct.Struct(">QBB")  # first seq, runs, runs not gone yet
_SEQ = struct.Struct(">Q")
RUN_KEY_BYTES = 12


class Run:
    """A run's stored value and state, decoded for one command (arrays over the packed bytes)."""

    __slots__ = ("key", "n", "group", "seqs", "ends", "rows", "ready_from", "live", "states", "counts",
                 "deadlines", "_value")

    def __init__(self, key: bytes, value, state):
        self.key = key
        value = bytes(value)
        self._value = value
        n, group_len = _RUN_HEAD.unpack_from(value)
        self.n = n
        at = _RUN_HEAD.size
        self.seqs = array("Q", value[at:at + 8 * n])
        self.seqs.byteswap()
        at += 8 * n
        self.ends = array("I", value[at:at + 4 * n])
        self.ends.byteswap()
        self.rows = value[at + 4 * n:]
        self.group = bytes(self.rows[_GROUP_AT:_GROUP_AT + group_len]) if group_len else b""
        state = bytes(state)
        self.ready_from, self.live = _STATE_HEAD.unpack_from(state)
        at = _STATE_HEAD.size
        self.states = bytearray(state[at:at + n])
        self.counts = array("I", state[at + n:at + 5 * n])
        self.counts.byteswap()
        self.deadlines = array("q", state[at + 5 * n:at + 13 * n])
        self.deadlines.byteswap()

    @property
    def enqueued_ms(self) -> int:
        """Every message of a run was enqueued at the same time."""
        return _LEASE_READ.unpack_from(self.rows)[3]

    @property
    def priority(self) -> int:
        return struct.unpack_from(">I", self.key)[0] - 2**31

    def row(self, i: int) -> bytes:
        return self.rows[self.ends[i - 1] if i else 0:self.ends[i]]

    def row_key(self, i: int) -> bytes:
        return row_key(self.seqs[i], self.priority, None)

    def seq_keys(self, start: int, stop: int) -> bytes:
        """The packed seq keys (>Q each) of messages start..stop-1."""
        at = _RUN_HEAD.size
        return self._value[at + 8 * start:at + 8 * stop]

    def record_bytes(self, start: int, stop: int) -> list[int]:
        """Each message's record size (its row minus the header and the run's group)."""
        fixed = _GROUP_AT + len(self.group)
        ends = self.ends
        return [ends[i] - (ends[i - 1] if i else 0) - fixed for i in range(start, stop)]

    def records_bytes(self, start: int, stop: int) -> int:
        """The record sizes of messages start..stop-1 together (from the row ends, no visit of each)."""
        if stop <= start:
            return 0
        ends = self.ends
        return ends[stop - 1] - (ends[start - 1] if start else 0) - (stop - start) * (_GROUP_AT + len(self.group))

    def index_of(self, seq: int) -> int | None:
        i = bisect_left(self.seqs, seq)
        return i if i < self.n and self.seqs[i] == seq else None

    def message_row(self, i: int) -> bytes:
        """Message i's row as records.encode_message would store it now (state, delivery count, deadline)."""
        return self.message_rows(i, i + 1)[0]

    def message_rows(self, start: int, stop: int) -> list[bytes]:
        """message_row of messages start..stop-1; the header's other fields are the same for the whole run."""
        pack, head = _LEASE_HEAD.pack, _LEASE_HEAD.size
        ends, blob, states, counts, deadlines = self.ends, self.rows, self.states, self.counts, self.deadlines
        _, priority, _, enqueued, available, _, _ = _LEASE_READ.unpack_from(blob)
        out = []
        add = out.append
        previous = ends[start - 1] if start else 0
        for i in range(start, stop):
            end, state = ends[i], states[i]
            add(pack(state, priority, counts[i], enqueued, available, deadlines[i] if state == IN_FLIGHT else 0) +
                blob[previous + head:end])
            previous = end
        return out

    def state_value(self) -> bytes:
        counts, deadlines = array("I", self.counts), array("q", self.deadlines)
        counts.byteswap()
        deadlines.byteswap()
        return _STATE_HEAD.pack(self.ready_from, self.live) + bytes(self.states) + counts.tobytes() + \
            deadlines.tobytes()

    def ready_entry(self) -> tuple[bytes, bytes] | None:
        """The run's `run_ready` pair while it has ready messages."""
        if self.ready_from >= self.n:
            return None
        return self.row_key(self.ready_from), self.key + ready_value(self.enqueued_ms, self.group)


def new_run(seqs: list[int], rows: list[bytes], group: bytes, priority: int):
    """The (key, value), (key, state) pairs of a new run of ready messages (never delivered: counts 0)."""
    n = len(seqs)
    key = row_key(seqs[0], priority, None)
    seq_array = array("Q", seqs)
    seq_array.byteswap()
    ends, end = array("I"), 0
    for row in rows:
        end += len(row)
        ends.append(end)
    ends.byteswap()
    value = _RUN_HEAD.pack(n, len(group)) + seq_array.tobytes() + ends.tobytes() + b"".join(rows)
    state = _STATE_HEAD.pack(0, n) + bytes((READY,)) * n + bytes(4 * n) + bytes(8 * n)
    return (key, value), (key, state)


def pieces(members: list, row_at: int) -> list[list]:
    """`members` cut in order into pieces of at most RUN_MESSAGES_MAX messages and RUN_ROW_BYTES_MAX bytes of rows
    (member[row_at] is a message's row); a piece holds at least one message."""
    cut, piece, size = [], [], 0
    for member in members:
        length = len(member[row_at])
        if piece and (len(piece) >= RUN_MESSAGES_MAX or size + length > RUN_ROW_BYTES_MAX):
            cut.append(piece)
            piece, size = [], 0
        piece.append(member)
        size += length
    if piece:
        cut.append(piece)
    return cut


def batch_entry(first_seq: int, last_seq: int, run_keys: list[bytes], run_of_seq: bytearray) -> tuple[bytes, bytes]:
    return _SEQ.pack(last_seq), _BATCH_HEAD.pack(first_seq, len(run_keys), len(run_keys)) + b"".join(run_keys) + \
        bytes(run_of_seq)


class RunFinder:
    """Finds the run of a seq through `run_batches`, caching the batch last read (a command's seqs are usually
    neighbours) and the span of seqs the last lookup found no batch for (the seqs of an expired lease are mostly
    acked already, their batches gone: each is answered without a read)."""

    def __init__(self, txn):
        self.txn = txn
        self._first = self._last = -1
        self._keys: list[bytes] = []
        self._run_of = b""
        self._gap = (-1, -1)  # seqs no batch holds, first and last (last None: every seq from first on)
        self.any = txn.first(RUN_BATCHES) is not None

    def run_key(self, seq: int) -> bytes | None:
        """The key of the run that stored `seq` (the run may be gone since: acked or opened)."""
        if not self.any:
            return None
        if not self._first <= seq <= self._last:
            gap_first, gap_last = self._gap
            if gap_first <= seq and (gap_last is None or seq <= gap_last):
                return None
            found = next(self.txn.items(RUN_BATCHES, _SEQ.pack(seq)), None)
            if found is None:
                self._gap = (seq, None)
                return None
            self._load(bytes(found[0]), bytes(found[1]))
            if not self._first <= seq <= self._last:
                self._gap = (seq, self._first - 1)
                return None
        number = self._run_of[seq - self._first]
        return None if number == NOT_IN_RUN else self._keys[number]

    def added(self) -> None:
        """A batch of runs was written through this finder's transaction."""
        self.any = True
        self._gap = (-1, -1)

    def _load(self, key: bytes, value: bytes) -> None:
        self._last = _SEQ.unpack(key)[0]
        self._first, count, _ = _BATCH_HEAD.unpack_from(value)
        at = _BATCH_HEAD.size
        self._keys = [value[at + RUN_KEY_BYTES * i:at + RUN_KEY_BYTES * (i + 1)] for i in range(count)]
        self._run_of = value[at + RUN_KEY_BYTES * count:]

    def forget(self) -> None:
        self._first = self._last = -1
        self._gap = (-1, -1)


def load_run(txn, key: bytes) -> Run | None:
    value = txn.get(RUNS, key)
    if value is None:
        return None
    return Run(key, value, txn.get(RUN_STATE, key))


def drop_from_batch(txn, run: Run) -> None:
    """Count a run that is gone (acked or opened) out of its batch's entry, which goes with its last run."""
    found = next(txn.items(RUN_BATCHES, _SEQ.pack(run.seqs[0])), None)
    if found is None:
        return
    key, value = bytes(found[0]), bytes(found[1])
    first, count, live = _BATCH_HEAD.unpack_from(value)
    if live <= 1:
        txn.delete(RUN_BATCHES, key)
    else:
        txn.put(RUN_BATCHES, key, _BATCH_HEAD.pack(first, count, live - 1) + value[_BATCH_HEAD.size:])


class RunSpan:
    """Messages start..stop-1 of a run, just leased: their seq keys and rows, made when a reader asks (only the
    leader that answers the lease does)."""

    __slots__ = ("run", "start", "stop")

    def __init__(self, run: Run, start: int, stop: int):
        self.run, self.start, self.stop = run, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def seq_keys(self) -> list[bytes]:
        packed = self.run.seq_keys(self.start, self.stop)
        return [packed[i:i + 8] for i in range(0, len(packed), 8)]

    def rows(self) -> list[bytes]:
        """Each message's row as the lease left it (in flight, its delivery count and deadline)."""
        return self.run.message_rows(self.start, self.stop)


def fitting(sizes, budget: int, at_least_one: bool) -> int:
    """How many of the first sizes fit in budget together (at least one when at_least_one)."""
    total = 0
    for taken, size in enumerate(sizes):
        total += size
        if total > budget:
            return taken if taken or not at_least_one else 1
    return len(sizes)


# ---------------------------------------------------------------------- reads (any thread, a read transaction)

def run_message(txn, seq: int, finder: RunFinder | None = None, loaded: dict | None = None):
    """The stored row of a seq still live inside a run, as `messages` would hold it; None otherwise. `loaded`
    keeps the runs read (or found gone) across calls of one read."""
    finder = finder or RunFinder(txn)
    key = finder.run_key(seq)
    if key is None:
        return None
    if loaded is None:
        run = load_run(txn, key)
    elif key in loaded:
        run = loaded[key]
    else:
        run = loaded[key] = load_run(txn, key)
    i = None if run is None else run.index_of(seq)
    if i is None or run.states[i] == GONE:
        return None
    return run.message_row(i)


def live_in_runs(txn, after_seq: int):
    """(seq, row) of every message live inside a run with a seq above after_seq, in seq order (lazily)."""
    for key, value in txn.items(RUN_BATCHES, _SEQ.pack(after_seq + 1)):
        first, count, _ = _BATCH_HEAD.unpack_from(bytes(value))
        at = _BATCH_HEAD.size
        value = bytes(value)
        found = []
        for i in range(count):
            run = load_run(txn, value[at + RUN_KEY_BYTES * i:at + RUN_KEY_BYTES * (i + 1)])
            if run is None:
                continue
            found += [(run.seqs[j], run.message_row(j)) for j in range(run.n)
                      if run.states[j] != GONE and run.seqs[j] > after_seq]
        found.sort()
        yield from found


def ready_in_runs(txn):
    """(row key, seq, row) of the ready messages inside runs, in delivery order (lazily)."""
    for _, value in txn.items(RUN_READY):
        run = load_run(txn, bytes(value[:RUN_KEY_BYTES]))
        for j in range(run.ready_from, run.n):
            yield run.row_key(j), run.seqs[j], run.message_row(j)


def ready_run_entries(txn):
    """(row key of the next ready message, messages ready, ready index value) of each run with ready messages,
    in delivery order."""
    for key, value in txn.items(RUN_READY):
        value = bytes(value)
        state = bytes(txn.get(RUN_STATE, value[:RUN_KEY_BYTES]))
        n = (len(state) - _STATE_HEAD.size) // 13
        yield bytes(key), n - _STATE_HEAD.unpack_from(state)[0], value[RUN_KEY_BYTES:]
