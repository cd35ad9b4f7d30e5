"""The queue partition's state machine: enqueue, lease, ack, nack, extend, delete, reschedule, dead-letter.

Pure and deterministic: time and the topic's policy arrive inside every command (stamped by the leader) and
storage is reached only through the Store seam. Each command first does the partition's due work (expired
leases go back to ready after a backoff or are marked dead, due delayed messages become ready, expired
idempotency keys and idle producers are forgotten), then its own work (queue_work), and writes all of it with
the applied Raft index in one transaction. A refused command writes nothing but the applied index and returns a
typed error value; every command also updates the store's content digest in the same transaction
(broker/content_digest.py); per-message refusals inside a batch (an ack from a lost lease) are error values in the result
list. Time never goes backwards: a command stamped earlier than the last one (a new leader's clock) uses the
last. The tables are described in queue_tables.
"""
from __future__ import annotations

import itertools

from raftbus.client import errors

from raftbus.broker.queues import commands as queue_commands
from raftbus.broker import content_digest
from raftbus.broker.content_digest import DigestingTxn
from raftbus.broker.queues.state.fair import group_path
from raftbus.broker.queues.state.reads import (
    any_message,
    due_in,
    oldest_in_buckets,
    messages_after,
    next_delivery_in,
    next_expiry_after,
    oldest_per_group,
    peek_in_flight,
    ready_messages,
    state_in,
    stored_message,
)
from raftbus.broker.queues.state.records import IN_FLIGHT, READY, StoredMessage, seq_of
from raftbus.broker.queues.state.tables import (
    GROUP,
    GROUPS,
    INDEX_OF,
    META,
    STATE,
    STATE_KEY,
    TABLES,
    Due,
    Enqueued,
    EnqueueResult,
    GroupStats,
    Leased,
    PartitionStats,
    QueueState,
)
from raftbus.broker.queues.state.work import HANDLERS, QueueWork


__all__ = ["QueueStateMachine", "Enqueued", "EnqueueResult", "Leased", "GroupStats", "PartitionStats"]


class _Refused(Exception):
    def __init__(self, error: errors.RaftbusError):
        self.error = error


class QueueStateMachine:
    TABLES = TABLES

    def __init__(self, store, ordering: str = "priority"):
        self._store = store
        self._fair = ordering == "fair"
        self._state = QueueState()
        self._due = Due()
        self.reload()

    # ------------------------------------------------------------------ apply (the Raft thread)
    def apply(self, index: int, command: bytes):
        """Apply one committed command; returns a result or a typed error value.

        A typed error decided by the command is an answer (only the applied index is written). Anything else — a
        StorageFailure, an OSError — propagates with nothing of the command committed: the replica must stop
        applying rather than skip an entry the others applied (RaftGroup does that)."""
        if index <= self._state.applied_index:
            return None
        try:
            cmd = queue_commands.decode(command)
            now_ms = max(cmd.now_ms, self._state.now_ms)
            with self._store.write() as raw_txn:
                txn = DigestingTxn(raw_txn, self._digest, META)
                work = QueueWork(txn, self._state, now_ms, cmd.policy, self._fair, cmd.kept_leases)
                work.advance()
                result = HANDLERS[cmd.op](work, cmd.body)
                if isinstance(result, errors.RaftbusError):
                    raise _Refused(result)
                state, due = work.finish(index)
                digest = txn.finish()
        except _Refused as refused:
            return self._refuse(index, refused.error)
        except errors.RaftbusError as refusal:
            return self._refuse(index, refusal)
        self._state, self._due = state, due
        self._published(index, digest)
        return result

    def _refuse(self, index: int, error: errors.RaftbusError):
        """Record only the applied index; the command changes nothing else."""
        state = self._state._replace(applied_index=index)
        with self._store.write() as raw_txn:
            txn = DigestingTxn(raw_txn, self._digest, META)
            txn.put(META, STATE_KEY, STATE.pack(*state))
            digest = txn.finish()
        self._state = state
        self._published(index, digest)
        return error

    def _published(self, index: int, digest: int) -> None:
        self._digest = digest
        self._digests.record(index, digest)

    # ------------------------------------------------------------------ reads (any thread)
    def applied_index(self) -> int:
        return self._state.applied_index

    def counts(self) -> tuple[int, int, int, int]:
        """(ready, delayed, in_flight, dead) as of the last applied command."""
        s = self._state
        return s.ready, s.delayed, s.in_flight, s.dead

    def stamped_ms(self) -> int:
        """The latest stamped time applied (a new leader's clock starts no earlier)."""
        return self._state.now_ms

    def next_due_ms(self) -> int | None:
        """The earliest delayed delivery or lease deadline (None: neither)."""
        times = [t for t in self._due[:2] if t is not None]
        return min(times) if times else None

    def next_delivery_ms(self) -> int | None:
        return self._due.next_delivery_ms

    def next_expiry_ms(self) -> int | None:
        """The earliest lease deadline (None: nothing in flight)."""
        return self._due.next_expiry_ms

    def next_expiry_after(self, after_ms: int) -> int | None:
        """The earliest lease deadline after after_ms (None: none)."""
        with self._store.read() as txn:
            return next_expiry_after(txn, after_ms)

    def deliverable(self) -> bool:
        return self._due.deliverable

    def get(self, seq: int) -> StoredMessage | None:
        with self._store.read() as txn:
            return any_message(txn, seq)

    def peek(self, state: int, max_messages: int) -> list[tuple[int, StoredMessage]]:
        """Up to max_messages messages in `state`, in that index's order (delivery order for ready ones)."""
        with self._store.read() as txn:
            if state == IN_FLIGHT:
                return peek_in_flight(txn, max_messages)
            if state == READY:
                return ready_messages(txn, max_messages)
            keys = [bytes(k) for k, _ in itertools.islice(txn.items(INDEX_OF[state]), max_messages)]
            found = [(seq_of(k), stored_message(txn, seq_of(k))) for k in keys]
        return [(seq, m) for seq, m in found if m is not None]

    def scan(self, after_seq: int, max_messages: int) -> list[tuple[int, StoredMessage]]:
        """Up to max_messages messages of every state with a seq above `after_seq`, in seq order."""
        with self._store.read() as txn:
            return messages_after(txn, after_seq, max_messages)

    def stats(self, groups_max: int, scan_max: int) -> PartitionStats:
        """Counts, the oldest ready message, the next delayed delivery and per-group counts. The oldest ready
        message is found by visiting the first message of each (group,) priority bucket, at most scan_max of them;
        a group's oldest in a priority-ordered partition by scanning up to scan_max ready messages (None for groups
        beyond that). The next delivery is the first delayed message's time, not the tick's next due time (which
        may be a lease deadline of an acked message: lease entries are dropped when they come due)."""
        with self._store.read() as txn:
            s = state_in(txn)
            next_delivery_ms = next_delivery_in(txn)
            oldest = oldest_in_buckets(txn, b"", scan_max)
            rows = list(itertools.islice(txn.items(GROUPS), groups_max + 1))
            truncated = len(rows) > groups_max
            groups = [(bytes(k[1:]), GROUP.unpack(v)) for k, v in rows[:groups_max]]
            wanted = {g for g, c in groups if c[0]}
            if self._fair:
                firsts = {g: oldest_in_buckets(txn, group_path(g), scan_max) for g in wanted}
            else:
                firsts = oldest_per_group(txn, wanted, scan_max)
        group_stats = tuple(GroupStats(g, *c, firsts.get(g)) for g, c in groups)
        return PartitionStats(s.ready, s.delayed, s.in_flight, s.dead, oldest, next_delivery_ms,
                              s.next_seq - 1, group_stats, truncated)

    def digest_at(self, index: int) -> int | None:
        """The content digest of the store once `index` was applied (None: not applied yet, or too long ago)."""
        return self._digests.at(index)

    def store_consistent(self) -> bool | None:
        """Whether the stored pairs still add up to the kept content digest (a full read of the store)."""
        with self._store.read() as txn:
            return content_digest.consistent(txn, self.TABLES, META)

    def reload(self) -> None:
        """Re-read the published state from the store (after a snapshot restore)."""
        with self._store.read() as txn:
            state = state_in(txn)
            self._due = due_in(txn, state.ready, self._fair)
            self._digest = content_digest.kept_or_computed(txn, self.TABLES, META)
        self._state = state
        self._digests = content_digest.DigestHistory(state.applied_index, self._digest)
