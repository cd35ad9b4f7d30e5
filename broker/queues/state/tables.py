"""A queue partition's tables, their value layouts and the values its state machine returns.

Tables (key layouts in queue_records and queue_fair):
    meta                b"state" -> QueueState;  b"content-digest" -> >Q, the store content digest
                        (broker/content_digest.py), written with every applied command
    messages            row key -> stored message. The row key is the message's delivery-order key (priority|seq;
                        fair: path|priority|seq), whatever its state: messages are stored in the order leases
                        take them, so a lease and its ack touch a few neighbouring pages, not one page each
    locators            seq -> row key (how get, ack, nack, extend and delete find a message by its id)
    ready               delivery order -> enqueued_ms >q | group  (the ready messages' row keys)
    delayed             time|seq -> b""
    in_flight           deadline|first seq -> the seqs leased with that deadline (>Q each). Kept lazily: an ack
                        or delete does not touch it; an entry is dropped at its deadline, when each seq still in
                        flight with that deadline expires (one write per lease batch instead of two per message)
    dead                seq -> b"" (marked dead; the dead-letter mover copies them out, then removes them)
    groups              b"g" + group -> ready, delayed, in_flight, dead (>IIII)
    leaves, cursors     fair ordering: groups that can be delivered from now, and rotation cursors
    idempotency         key -> seq >Q | expires_ms >q;   idempotency_expiry  time|key -> b""
    producers           producer_id -> expires_ms >q | remembered batches;   producer_expiry  time|producer_id -> b""
    settlers            settler_id -> expires_ms >q | sequence >q | count >I | failures (index >I, code >B)
                        (the answer to a consumer's last ack/nack batch, for its retry); settler_expiry likewise
    runs, run_state, run_ready, run_batches
                        messages stored a run at a time instead of a row each (state/runs.py)
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from raftbus.broker.queues.state.records import DEAD, DELAYED, IN_FLIGHT, READY, StoredMessage, decode_message
from raftbus.broker.queues.state.runs import RUN_TABLES

META, MESSAGES, LOCATORS, READY_T, DELAYED_T, IN_FLIGHT_T, DEAD_T = (
    "meta", "messages", "locators", "ready", "delayed", "in_flight", "dead")
GROUPS, LEAVES, CURSORS = "groups", "leaves", "cursors"
IDEMPOTENCY, IDEMPOTENCY_EXPIRY, PRODUCERS, PRODUCER_EXPIRY = (
    "idempotency", "idempotency_expiry", "producers", "producer_expiry")
SETTLERS, SETTLER_EXPIRY = "settlers", "settler_expiry"
TABLES = (META, MESSAGES, LOCATORS, READY_T, DELAYED_T, IN_FLIGHT_T, DEAD_T, GROUPS, LEAVES, CURSORS,
          IDEMPOTENCY, IDEMPOTENCY_EXPIRY, PRODUCERS, PRODUCER_EXPIRY, SETTLERS, SETTLER_EXPIRY, *RUN_TABLES)
INDEX_OF = {READY: READY_T, DELAYED: DELAYED_T, IN_FLIGHT: IN_FLIGHT_T, DEAD: DEAD_T}
STATE_KEY = b"state"

STATE = struct.Struct(">qqQQQQQ")
GROUP = struct.Struct(">IIII")
SEQ = struct.Struct(">Q")
EXPIRES = struct.Struct(">q")
_TIME = struct.Struct(">Q")


def time8(time_ms: int) -> bytes:
    """A sign-flipped 8-byte time: the prefix of expiry index keys."""
    return _TIME.pack(time_ms + 2**63)


def time8_of(key: bytes) -> int:
    return _TIME.unpack_from(key)[0] - 2**63


class QueueState(NamedTuple):
    applied_index: int = 0
    now_ms: int = -(2**62)     # the latest stamped time applied: time never goes backwards
    next_seq: int = 1
    ready: int = 0
    delayed: int = 0
    in_flight: int = 0
    dead: int = 0


class Due(NamedTuple):
    next_delivery_ms: int | None = None  # earliest delayed delivery time
    next_expiry_ms: int | None = None    # earliest lease deadline
    deliverable: bool = False            # a lease now would find a message


class Enqueued(NamedTuple):
    seq: int
    duplicate: bool


class EnqueueResult(NamedTuple):
    enqueued_ms: int
    messages: tuple[Enqueued, ...]


class Leased(NamedTuple):
    """A leased message as stored (decoded only where it is needed: on the leader that answers)."""

    seq: int
    raw: bytes

    @property
    def message(self) -> StoredMessage:
        return decode_message(self.raw)


class LeasedBatch(Sequence):
    """The messages one lease took, as their seq keys and stored rows (no object per message: every replica
    builds it, only the leader reads it). Indexing gives `Leased` values. Built from parts: (seq keys, rows) lists
    of messages stored as rows, and spans of runs (state/runs.py) whose keys and rows are made only when read."""

    __slots__ = ("_parts", "_seq_keys", "_rows", "_length")

    def __init__(self, seq_keys: list[bytes], rows: list, spans=()):
        self._parts = [(seq_keys, rows)] if seq_keys else []
        self._parts += spans
        self._seq_keys = self._rows = None
        self._length = len(rows) + sum(len(span) for span in spans)

    @classmethod
    def of_parts(cls, parts) -> "LeasedBatch":
        """parts: (seq keys, rows) pairs and run spans, in delivery order."""
        batch = cls([], [])
        batch._parts = list(parts)
        batch._length = sum(len(part[1]) if isinstance(part, tuple) else len(part) for part in batch._parts)
        return batch

    def _materialize(self) -> None:
        seq_keys, rows = [], []
        for part in self._parts:
            if isinstance(part, tuple):
                seq_keys += part[0]
                rows += part[1]
            else:
                seq_keys += part.seq_keys()
                rows += part.rows()
        self._seq_keys, self._rows = seq_keys, rows

    @property
    def seq_keys(self) -> list[bytes]:
        if self._seq_keys is None:
            self._materialize()
        return self._seq_keys

    @property
    def rows(self) -> list:
        if self._rows is None:
            self._materialize()
        return self._rows

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return Leased(SEQ.unpack(self.seq_keys[index])[0], bytes(self.rows[index]))

    def __eq__(self, other) -> bool:
        return isinstance(other, (list, tuple, LeasedBatch)) and list(self) == list(other)

    __hash__ = None


class GroupStats(NamedTuple):
    group: bytes
    ready: int
    delayed: int
    in_flight: int
    dead: int
    oldest_ready_enqueued_ms: int | None


class PartitionStats(NamedTuple):
    ready: int
    delayed: int
    in_flight: int
    dead: int
    oldest_ready_enqueued_ms: int | None
    next_delivery_ms: int | None  # when the earliest delayed message becomes ready (None: none is delayed)
    enqueued_total: int
    groups: tuple[GroupStats, ...]
    groups_truncated: bool
