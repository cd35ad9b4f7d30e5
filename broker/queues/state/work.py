"""What each queue command does, on top of MessageMoves (see queue.py for the rules every command follows)."""
from __future__ import annotations

import itertools

from raftbus.client import errors

from raftbus.broker.queues import commands as qc
from raftbus.broker.queues.state.fair import group_path
from raftbus.broker.queues.state.moves import IDEMPOTENCY_VALUE, NO_STATE, MessageMoves
from raftbus.broker.queues.state.records import (
    DEAD,
    DELAYED,
    IN_FLIGHT,
    READY,
    StoredMessage,
    leased_groups,
    leased_rows,
    new_row,
    ready_value,
    record_bytes,
    row_key,
    seq_key,
    time_key,
)
from raftbus.broker.queues.state.retries import (
    check_sequence,
    producer_batches,
    remember_batch,
    remember_settled,
    settled_before,
)
from raftbus.broker.queues.state.tables import (
    DELAYED_T,
    IDEMPOTENCY,
    IDEMPOTENCY_EXPIRY,
    LOCATORS,
    MESSAGES,
    READY_T,
    Enqueued,
    EnqueueResult,
    LeasedBatch,
    time8,
)

MOVE_KEY_PREFIX = b"\x01"  # idempotency keys of dead-letter moves and redrives (user keys are printable)


class QueueWork(MessageMoves):
    """The handlers of a queue command: each returns its result, per-message refusals as error values in a
    list, or one typed error that refuses the whole command (the state machine then writes nothing of it)."""

    def enqueue(self, body: qc.Enqueue):
        remembered: list[bytes] = []
        if body.producer_id:
            remembered = producer_batches(self.txn, body.producer_id)
            verdict = check_sequence(remembered, body)
            if verdict is not None:
                return verdict if isinstance(verdict, errors.RaftbusError) else EnqueueResult(self.now, verdict)
        first_seq = self.next_seq
        results = self._enqueue_many(body.items)
        if body.producer_id:
            remember_batch(self.txn, body, remembered, first_seq, results, self.now + self.policy.producer_idle_ms)
        return EnqueueResult(self.now, results)

    def _enqueue_many(self, items) -> tuple[Enqueued, ...]:
        """The hot path: messages without an idempotency key (or origin) are written together, table by table;
        keyed ones one by one, since a key may repeat within the batch."""
        now, fair = self.now, self.fair
        rows, locators, ready, delayed, ready_groups, delayed_groups = [], [], [], [], [], []
        results = []
        for item in items:
            (priority, deliver_at_ms, delivery_count, enqueued_ms, origin_id, group, idempotency_key, last_error,
             record) = item
            if origin_id or idempotency_key:
                results.append(self._enqueue_one(item))
                continue
            seq = self.next_seq
            self.next_seq += 1
            key = row_key(seq, priority, group_path(group) if fair else None)
            enqueued_ms = enqueued_ms or now
            if deliver_at_ms > now:
                rows.append((key, new_row(DELAYED, priority, delivery_count, enqueued_ms, deliver_at_ms, 0, group, b"",
                                          last_error, record)))
                delayed.append((time_key(deliver_at_ms, seq), b""))
                delayed_groups.append(group)
            else:
                rows.append((key, new_row(READY, priority, delivery_count, enqueued_ms, now, 0, group, b"", last_error,
                                          record)))
                ready.append((key, ready_value(enqueued_ms, group)))
                ready_groups.append(group)
            locators.append((key[-8:], key))
            results.append(Enqueued(seq, False))
        txn = self.txn  # every key holds a fresh sequence number: nothing to read before writing
        txn.put_new_many(MESSAGES, rows)
        txn.put_new_many(LOCATORS, locators)
        txn.put_new_many(READY_T, ready)
        txn.put_new_many(DELAYED_T, delayed)
        self.count_moves(ready_groups, NO_STATE, READY)
        self.count_moves(delayed_groups, NO_STATE, DELAYED)
        return tuple(results)

    def _enqueue_one(self, item: qc.EnqueueItem) -> Enqueued:
        now = self.now
        key = MOVE_KEY_PREFIX + seq_key(item.origin_id) if item.origin_id else item.idempotency_key
        if key:
            raw = self.txn.get(IDEMPOTENCY, key)
            if raw is not None:
                seq, expires = IDEMPOTENCY_VALUE.unpack(raw)
                if expires > now:
                    return Enqueued(seq, True)
        seq = self.next_seq
        self.next_seq += 1
        delayed = item.deliver_at_ms > now
        self.add(seq, StoredMessage(
            DELAYED if delayed else READY, item.priority, item.delivery_count, item.enqueued_ms or now,
            item.deliver_at_ms if delayed else now, 0, item.origin_id, item.group, item.idempotency_key,
            item.last_error, item.record))
        window = self.policy.idempotency_window_ms
        if key and window > 0:
            expires = now + window
            self.txn.put(IDEMPOTENCY, key, IDEMPOTENCY_VALUE.pack(seq, expires))
            self.txn.put(IDEMPOTENCY_EXPIRY, time8(expires) + key, b"")
        return Enqueued(seq, False)

    def lease(self, body: qc.Lease) -> LeasedBatch:
        """The hot path: the first ready keys are the rows to lease (neighbours in `messages`), each row is
        patched in place, and each table is written once for the batch."""
        if self.fair:
            return self._lease_fair(body)
        txn = self.txn
        deadline = self.now + body.visibility_ms
        ready = [(bytes(key), bytes(value)) for key, value in itertools.islice(txn.items(READY_T), body.max_messages)]
        keys = [key for key, _ in ready]
        stored = txn.get_many(MESSAGES, keys)
        rows, groups = leased_rows(stored, deadline, body.max_bytes)
        if not rows:
            return LeasedBatch([], [])
        del keys[len(rows):], ready[len(rows):], stored[len(rows):]
        txn.delete_first_read(READY_T, ready)  # the pairs just read: the first ones
        txn.replace_read_many(MESSAGES, zip(keys, rows), stored)
        self.count_moves(groups, READY, IN_FLIGHT)
        seq_keys = [key[-8:] for key in keys]
        self.add_in_flight_keys(deadline, seq_keys)
        return LeasedBatch(seq_keys, rows)

    def _lease_fair(self, body: qc.Lease) -> LeasedBatch:
        """One rotation pick at a time: each message leaves the ready index (and is counted) before the next
        pick, which depends on it."""
        txn = self.txn
        deadline = self.now + body.visibility_ms
        seq_keys, rows, size = [], [], 0
        for _ in range(body.max_messages):
            path = self.rotation.pick()
            if path is None:
                break
            key = next(txn.items(READY_T, path))[0]
            raw = txn.get(MESSAGES, key)
            size += record_bytes(raw)
            if rows and size > body.max_bytes:
                break
            leased, groups = leased_rows([raw], deadline, body.max_bytes)
            txn.delete(READY_T, key)
            txn.put(MESSAGES, key, leased[0])
            self.count_moves(groups, READY, IN_FLIGHT)
            seq_keys.append(key[-8:])
            rows.append(leased[0])
        if rows:
            self.add_in_flight_keys(deadline, seq_keys)
        return LeasedBatch(seq_keys, rows)

    def _check_lease(self, seq: int, m: StoredMessage | None, delivery_count: int):
        if m is None:
            return errors.UnknownMessage("no such message (acked, deleted, dead-lettered or never enqueued)")
        if m.state != IN_FLIGHT or m.delivery_count != delivery_count:
            return errors.LeaseLost(f"the lease of delivery {delivery_count} no longer holds: the message is "
                                    f"{m.state_name} at delivery {m.delivery_count}")
        return None

    def ack(self, body: qc.Settle) -> list:
        return self._settle(body, self._ack_many)

    def nack(self, body: qc.Settle) -> list:
        return self._settle(body, lambda nacks: [self._nack_one(nack) for nack in nacks])

    def _ack_many(self, leases: qc.PackedLeases) -> list:
        """The hot path: each locator and each row is taken out of its table in one step (found and deleted
        together), and the rows' headers decide. A batch with a refusal is put back as it was and goes one by
        one, as does one naming a message twice (the end state does not depend on the path taken)."""
        txn = self.txn
        seq_keys, counts = leases.seq_keys_and_counts()
        if len(set(seq_keys)) != len(seq_keys):
            return [self._ack_one(lease) for lease in leases]
        keys = txn.pop_many(LOCATORS, seq_keys)
        rows = txn.pop_many(MESSAGES, keys) if None not in keys else []
        groups = leased_groups(rows, counts) if rows else None
        if groups is None:
            txn.put_many(LOCATORS, [(seq_key, key) for seq_key, key in zip(seq_keys, keys) if key is not None])
            txn.put_many(MESSAGES, [(key, row) for key, row in zip(keys, rows) if row is not None])
            return [self._ack_one(lease) for lease in leases]
        self.count_moves(groups, IN_FLIGHT, NO_STATE)
        return [None] * len(leases)

    def _ack_one(self, lease):
        seq, delivery_count = lease
        m = self.message(seq)
        refusal = self._check_lease(seq, m, delivery_count)
        if refusal is None:
            self.txn.delete(MESSAGES, self.row_key(seq, m))
            self.txn.delete(LOCATORS, seq_key(seq))
            self.count_moves([m.group], IN_FLIGHT, NO_STATE)
        return refusal

    def _nack_one(self, nack: qc.Nack):
        m = self.message(nack.seq)
        refusal = self._check_lease(nack.seq, m, nack.delivery_count)
        if refusal is None:
            self.retry(nack.seq, m, nack.delay_ms, nack.reason)
        return refusal

    def _settle(self, body: qc.Settle, settle_items) -> list:
        """Per item: None or a refusal. A retry of the settler's last batch gets that batch's answers again."""
        answers = settled_before(self.txn, body)
        if answers is not None:
            return answers
        results = settle_items(body.items)
        remember_settled(self.txn, body, results, self.now + self.policy.producer_idle_ms)
        return results

    def extend(self, extensions) -> list:
        results = []
        for seq, delivery_count, visibility_ms in extensions:
            m = self.message(seq)
            refusal = self._check_lease(seq, m, delivery_count)
            if refusal is None:
                refusal = self.move(seq, m, deadline_ms=self.now + visibility_ms).deadline_ms
            results.append(refusal)
        return results

    def delete(self, seqs) -> list:
        results = []
        for seq in seqs:
            m = self.message(seq)
            if m is None:
                results.append(errors.UnknownMessage("no such message (acked, deleted, dead-lettered or never "
                                                     "enqueued)"))
                continue
            self.remove(seq, m)
            results.append(None)
        return results

    def dead_remove(self, seqs) -> int:
        removed = 0
        for seq in seqs:
            m = self.message(seq)
            if m is not None and m.state == DEAD:
                self.remove(seq, m)
                removed += 1
        return removed

    def change(self, change: qc.Change):
        seq = change.seq
        m = self.message(seq)
        if m is None:
            return errors.UnknownMessage("no such message (acked, deleted, dead-lettered or never enqueued)")
        changes = {} if change.priority is None else {"priority": change.priority}
        if change.deliver_at_ms is not None:
            if m.state not in (READY, DELAYED):
                return errors.MessageNotWaiting(f"the message is {m.state_name}; only a ready or delayed message "
                                                "can be rescheduled")
            later = change.deliver_at_ms > self.now
            changes["state"] = DELAYED if later else READY
            changes["available_ms"] = change.deliver_at_ms if later else self.now
        if m.state in (READY, DELAYED):
            return self.move(seq, m, **changes)
        changed = m._replace(**changes)  # leased or dead: its index does not depend on the priority
        self.rewrite(seq, m, changed)
        return changed

    def tick(self, _body) -> None:
        return None



HANDLERS = {
    qc.ENQUEUE: QueueWork.enqueue,
    qc.LEASE: QueueWork.lease,
    qc.ACK: QueueWork.ack,
    qc.NACK: QueueWork.nack,
    qc.EXTEND: QueueWork.extend,
    qc.DELETE: QueueWork.delete,
    qc.DEAD_REMOVE: QueueWork.dead_remove,
    qc.CHANGE: QueueWork.change,
    qc.TICK: QueueWork.tick,
}
