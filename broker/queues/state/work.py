"""What each queue command does, on top of MessageMoves (see queue.py for the rules every command follows)."""
from __future__ import annotations

import bisect
import itertools
import sys
from array import array

from raftbus.client import errors

from raftbus.broker.queues import commands as queue_commands
from raftbus.broker.queues.state.fair import group_path
from raftbus.broker.queues.state.moves import IDEMPOTENCY_VALUE, NO_STATE, MessageMoves
from raftbus.broker.queues.state import runs
from raftbus.broker.queues.state.records import (
    DEAD,
    DELAYED,
    IN_FLIGHT,
    READY,
    STATE_NAMES,
    StoredMessage,
    leased_groups,
    leased_rows,
    new_row,
    ready_value,
    record_bytes,
    seq_of,
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


_NOT_IN_A_RUN = object()  # an ack's answer still to be decided by the rows
_IN_FLIGHT_BYTES = bytes((IN_FLIGHT,))


def _lease_lost(delivery_count: int, state: int, stored_count: int) -> errors.LeaseLost:
    """The refusal of a settlement from a lease that no longer holds (a row's or a run's message)."""
    return errors.LeaseLost(f"the lease of delivery {delivery_count} no longer holds: the message is "
                            f"{STATE_NAMES[state]} at delivery {stored_count}")


def _common_length(a, a_start: int, b, b_start: int) -> int:
    """How many items of `a` from a_start equal those of `b` from b_start, in a row (slice comparisons only:
    halving the candidate length until the prefixes match, then growing it back)."""
    length = min(len(a) - a_start, len(b) - b_start)
    if a[a_start:a_start + length] == b[b_start:b_start + length]:
        return length
    low, high = 0, length  # a prefix of `low` items matches, one of `high` does not
    while high - low > 1:
        middle = (low + high) // 2
        if a[a_start:a_start + middle] == b[b_start:b_start + middle]:
            low = middle
        else:
            high = middle
    return low


class QueueWork(MessageMoves):
    """The handlers of a queue command: each returns its result, per-message refusals as error values in a
    list, or one typed error that refuses the whole command (the state machine then writes nothing of it)."""

    def enqueue_runs(self, body: queue_commands.Enqueue):
        """ENQUEUE, with the batch's plain ready messages stored as runs where a priority class allows."""
        return self.enqueue(body, runs=not self.fair)

    def enqueue(self, body: queue_commands.Enqueue, runs: bool = False):
        remembered: list[bytes] = []
        if body.producer_id:
            remembered = producer_batches(self.txn, body.producer_id)
            verdict = check_sequence(remembered, body)
            if verdict is not None:
                return verdict if isinstance(verdict, errors.RaftbusError) else EnqueueResult(self.now, verdict)
        first_seq = self.next_seq
        results = self._enqueue_many(body.items, runs)
        if body.producer_id:
            remember_batch(self.txn, body, remembered, first_seq, results, self.now + self.policy.producer_idle_ms)
        return EnqueueResult(self.now, results)

    def _enqueue_many(self, items, runs: bool = False) -> tuple[Enqueued, ...]:
        """The hot path: messages without an idempotency key (or origin) are written together, table by table;
        keyed ones one by one, since a key may repeat within the batch. With `runs`, the plain ready messages
        are gathered per priority and stored as runs where a class allows (`_write_runs`)."""
        now, fair = self.now, self.fair
        rows, locators, ready, delayed, ready_groups, delayed_groups = [], [], [], [], [], []
        results = []
        first_seq = self.next_seq
        classes: dict[int, list] = {}
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
            elif runs and not delivery_count and not last_error:  # a run's, or a row after _write_runs
                classes.setdefault(priority, []).append(
                    (seq, key, new_row(READY, priority, 0, enqueued_ms, now, 0, group, b"", b"", record), group,
                     enqueued_ms))
                results.append(Enqueued(seq, False))
                continue
            else:
                rows.append((key, new_row(READY, priority, delivery_count, enqueued_ms, now, 0, group, b"", last_error,
                                          record)))
                ready.append((key, ready_value(enqueued_ms, group)))
                ready_groups.append(group)
            locators.append((key[-8:], key))
            results.append(Enqueued(seq, False))
        if classes:
            for members in self._write_runs(classes, first_seq):  # the classes that could not be runs
                for seq, key, row, group, enqueued_ms in members:
                    rows.append((key, row))
                    ready.append((key, ready_value(enqueued_ms, group)))
                    ready_groups.append(group)
                    locators.append((key[-8:], key))
        txn = self.txn  # every key holds a fresh sequence number: nothing to read before writing
        txn.put_new_many(MESSAGES, rows)
        txn.put_new_many(LOCATORS, locators)
        txn.put_new_many(READY_T, ready)
        txn.put_new_many(DELAYED_T, delayed)
        self.count_moves(ready_groups, NO_STATE, READY)
        self.count_moves(delayed_groups, NO_STATE, DELAYED)
        return tuple(results)

    def _write_runs(self, classes: dict[int, list], first_seq: int) -> list[list]:
        """Store each priority class of plain ready messages that shares a group and an enqueue time as runs
        (pieces of it bounded by RUN_MESSAGES_MAX and RUN_ROW_BYTES_MAX); the classes and pieces that cannot be
        runs are returned (stored as rows)."""
        new_runs, states, run_ready, run_keys, left = [], [], [], [], []
        run_of_seq = bytearray((runs.NOT_IN_RUN,)) * (self.next_seq - first_seq)
        for priority, members in classes.items():
            group, enqueued_ms = members[0][3], members[0][4]
            if any(m[3] != group or m[4] != enqueued_ms for m in members):
                left.append(members)
                continue
            for piece in runs.pieces(members, 2):
                if len(piece) < runs.RUN_MESSAGES_MIN or len(run_keys) >= runs.RUNS_PER_BATCH_MAX:
                    left.append(piece)
                    continue
                seqs = [m[0] for m in piece]
                run, state = runs.new_run(seqs, [m[2] for m in piece], group, priority)
                number = len(run_keys)
                for seq in seqs:
                    run_of_seq[seq - first_seq] = number
                new_runs.append(run)
                states.append(state)
                run_ready.append((piece[0][1], run[0] + ready_value(enqueued_ms, group)))
                run_keys.append(run[0])
                self.count_moves_n(group, len(seqs), NO_STATE, READY)
        if run_keys:
            txn = self.txn
            txn.put_new_many(runs.RUNS, new_runs)
            txn.put_new_many(runs.RUN_STATE, states)
            txn.put_new_many(runs.RUN_READY, run_ready)
            txn.put_new_many(runs.RUN_BATCHES, [runs.batch_entry(first_seq, self.next_seq - 1, run_keys,
                                                                             run_of_seq)])
            self.runs.added()
        return left

    def _enqueue_one(self, item: queue_commands.EnqueueItem) -> Enqueued:
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

    def lease(self, body: queue_commands.Lease) -> LeasedBatch:
        """The hot path: the first ready keys are the rows to lease (neighbours in `messages`), each row is
        patched in place, and each table is written once for the batch."""
        if self.fair:
            return self._lease_fair(body)
        if self.runs.any:
            return self._lease_merged(body)
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

    def _lease_merged(self, body: queue_commands.Lease) -> LeasedBatch:
        """A lease over rows and runs: delivery order is the merge of `ready` and `run_ready` (both keyed by the
        row key of a ready message); each step takes from whichever source is first, up to the other's next key.
        The byte bound counts across steps, as one lease of rows does (at least one message)."""
        txn = self.txn
        deadline = self.now + body.visibility_ms
        remaining, budget = body.max_messages, body.max_bytes
        parts, seq_keys = [], []
        while remaining > 0:
            row_first, run_first = txn.first(READY_T), txn.first(runs.RUN_READY)
            if row_first is None and run_first is None:
                break
            row_key_first = None if row_first is None else bytes(row_first[0])
            run_key_first = None if run_first is None else bytes(run_first[0])
            if run_key_first is None or (row_key_first is not None and row_key_first < run_key_first):
                taken, used, cut = self._lease_rows_before(run_key_first, remaining, budget, deadline, not parts,
                                                          parts, seq_keys)
            else:
                taken, used, cut = self._lease_run(run_key_first, bytes(run_first[1]), row_key_first, remaining,
                                                   budget, deadline, not parts, parts, seq_keys)
            remaining -= taken
            budget -= used
            if cut or not taken:
                break
        if seq_keys:
            self.add_in_flight_packed(deadline, b"".join(seq_keys))
        return LeasedBatch.of_parts(parts)

    def _lease_rows_before(self, bound: bytes | None, remaining: int, budget: int, deadline: int, first: bool,
                           parts: list, seq_keys: list) -> tuple[int, int, bool]:
        """Lease the first ready rows below `bound`: (messages, record bytes, whether the byte bound cut it)."""
        txn = self.txn
        ready = []
        for key, value in itertools.islice(txn.items(READY_T), remaining):
            key = bytes(key)
            if bound is not None and key >= bound:
                break
            ready.append((key, bytes(value)))
        keys = [key for key, _ in ready]
        stored = txn.get_many(MESSAGES, keys)
        sizes = [record_bytes(raw) for raw in stored]
        count = runs.fitting(sizes, budget, first)
        if not count:
            return 0, 0, True
        del keys[count:], ready[count:], stored[count:]
        rows, groups = leased_rows(stored, deadline, sys.maxsize)
        txn.delete_first_read(READY_T, ready)
        txn.replace_read_many(MESSAGES, zip(keys, rows), stored)
        self.count_moves(groups, READY, IN_FLIGHT)
        keys = [key[-8:] for key in keys]
        parts.append((keys, rows))
        seq_keys += keys
        return count, sum(sizes[:count]), count < len(sizes)

    def _lease_run(self, ready_key: bytes, ready_entry: bytes, bound: bytes | None, remaining: int, budget: int,
                   deadline: int, first: bool, parts: list, seq_keys: list) -> tuple[int, int, bool]:
        """Lease the next ready messages of the run whose `run_ready` pair is given, below `bound` (the first
        ready row's key): (messages, record bytes, whether the byte bound cut it)."""
        txn = self.txn
        run = runs.load_run(txn, ready_entry[:runs.RUN_KEY_BYTES])
        start = run.ready_from
        stop = min(run.n, start + remaining)
        if bound is not None and bound[:4] == run.key[:4]:  # a ready row of the same priority: stop before it
            stop = min(stop, bisect.bisect_left(run.seqs, seq_of(bound), start, stop))
        total = run.records_bytes(start, stop)
        if total <= budget:  # the whole stretch fits: no size per message needed
            count, used = stop - start, total
        else:
            sizes = run.record_bytes(start, stop)
            count = runs.fitting(sizes, budget, first)
            used = sum(sizes[:count])
        if not count:
            return 0, 0, True
        end = start + count
        run.states[start:end] = bytes((IN_FLIGHT,)) * count
        run.counts[start:end] = array("I", [c + 1 for c in run.counts[start:end]])
        run.deadlines[start:end] = array("q", [deadline]) * count
        run.ready_from = end
        txn.put(runs.RUN_STATE, run.key, run.state_value())
        txn.delete(runs.RUN_READY, ready_key)
        entry = run.ready_entry()
        if entry is not None:
            txn.put(runs.RUN_READY, *entry)
        self.count_moves_n(run.group, count, READY, IN_FLIGHT)
        parts.append(runs.RunSpan(run, start, end))
        seq_keys.append(run.seq_keys(start, end))
        return count, used, count < stop - start

    def _lease_fair(self, body: queue_commands.Lease) -> LeasedBatch:
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
            return _lease_lost(delivery_count, m.state, m.delivery_count)
        return None

    def ack(self, body: queue_commands.Settle) -> list:
        return self._settle(body, self._ack_many)

    def nack(self, body: queue_commands.Settle) -> list:
        return self._settle(body, lambda nacks: [self._nack_one(nack) for nack in nacks])

    def _ack_many(self, leases: queue_commands.PackedLeases) -> list:
        """The hot path: each locator and each row is taken out of its table in one step (found and deleted
        together), and the rows' headers decide. A batch with a refusal is put back as it was and goes one by
        one, as does one naming a message twice (the end state does not depend on the path taken). Messages
        still inside runs are settled there first (_ack_in_runs); the rest go this way."""
        seq_keys, counts = leases.seq_keys_and_counts()
        if len(set(seq_keys)) != len(seq_keys):
            return [self._ack_one(lease) for lease in leases]
        if not self.runs.any:
            return self._ack_rows(leases, seq_keys, counts)
        answers = [_NOT_IN_A_RUN] * len(seq_keys)
        self._ack_in_runs(leases.seqs(), counts, answers)
        if _NOT_IN_A_RUN not in answers:
            return answers
        left = [i for i, answer in enumerate(answers) if answer is _NOT_IN_A_RUN]
        rest = self._ack_rows([leases[i] for i in left], [seq_keys[i] for i in left], [counts[i] for i in left])
        for i, answer in zip(left, rest):
            answers[i] = answer
        return answers

    def _ack_in_runs(self, seqs, counts, answers: list) -> None:
        """Ack the messages still inside runs, writing None or the refusal at their place in `answers`; the
        others (rows, or unknown) keep _NOT_IN_A_RUN. The seqs one lease took from a run are neighbours in it and
        in the ack: each such stretch is checked and settled with slice operations."""
        txn, finder = self.txn, self.runs
        seq_array, count_array = array("Q", seqs), array("I", counts)
        touched: dict[bytes, list] = {}  # run key -> [run, messages acked]
        total, p = len(seqs), 0
        while p < total:
            key = finder.run_key(seqs[p])
            entry = None if key is None else touched.get(key)
            if entry is None and key is not None:
                run = runs.load_run(txn, key)
                entry = touched[key] = [run, 0] if run is not None else None
            i = None if entry is None else entry[0].index_of(seqs[p])
            if i is None:
                p += 1
                continue
            run = entry[0]
            k = _common_length(seq_array, p, run.seqs, i)
            if run.states[i:i + k] == _IN_FLIGHT_BYTES * k and run.counts[i:i + k] == count_array[p:p + k]:
                run.states[i:i + k] = bytes(k)  # GONE
                answers[p:p + k] = [None] * k
                entry[1] += k
            else:
                for q in range(k):
                    state, stored = run.states[i + q], run.counts[i + q]
                    if state == runs.GONE:
                        continue
                    if state != IN_FLIGHT or stored != counts[p + q]:
                        answers[p + q] = _lease_lost(counts[p + q], state, stored)
                        continue
                    run.states[i + q] = runs.GONE
                    answers[p + q] = None
                    entry[1] += 1
            p += k
        for key, entry in touched.items():
            if entry is None or not entry[1]:
                continue
            run, acked = entry
            run.live -= acked
            self.count_moves_n(run.group, acked, IN_FLIGHT, NO_STATE)
            if run.live:
                txn.put(runs.RUN_STATE, key, run.state_value())
            else:
                txn.delete(runs.RUNS, key)
                txn.delete(runs.RUN_STATE, key)
                runs.drop_from_batch(txn, run)

    def _ack_rows(self, leases, seq_keys, counts) -> list:
        """The ack hot path over rows (see _ack_many)."""
        txn = self.txn
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

    def _nack_one(self, nack: queue_commands.Nack):
        m = self.message(nack.seq)
        refusal = self._check_lease(nack.seq, m, nack.delivery_count)
        if refusal is None:
            self.retry(nack.seq, m, nack.delay_ms, nack.reason)
        return refusal

    def _settle(self, body: queue_commands.Settle, settle_items) -> list:
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

    def change(self, change: queue_commands.Change):
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
    queue_commands.ENQUEUE: QueueWork.enqueue,
    queue_commands.ENQUEUE_RUNS: QueueWork.enqueue_runs,
    queue_commands.LEASE: QueueWork.lease,
    queue_commands.ACK: QueueWork.ack,
    queue_commands.NACK: QueueWork.nack,
    queue_commands.EXTEND: QueueWork.extend,
    queue_commands.DELETE: QueueWork.delete,
    queue_commands.DEAD_REMOVE: QueueWork.dead_remove,
    queue_commands.CHANGE: QueueWork.change,
    queue_commands.TICK: QueueWork.tick,
}
