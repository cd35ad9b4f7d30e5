"""Queue topics: enqueue, lease (once, long-polled or streamed), settle, inspect and reschedule messages.

The rules, independent of gRPC. Every write is one replicated command stamped with this leader's time and the
topic's policy (see queues/state/machine.py); reads come from the leader's applied state. Waiting for messages never
polls: waiters sleep on the partition's apply condition, with a timer for the next delayed delivery or lease
expiry. Batch calls answer per message: a list holding None (done), a value, or a typed error.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager

from raftbus.client import errors
from raftbus.client.queues.ids import SEQ_BITS, SEQ_MASK, message_id, split_message_id
from raftbus.client.queues.codec import LEASE_REF, unpack_leases
from raftbus.client.records import check_framing

from raftbus.broker.clock import Stamp, TermClock
from raftbus.broker.queues import commands as queue_commands
from raftbus.broker.queues.state.records import DEAD, DELAYED, IN_FLIGHT, READY
from raftbus.broker.context import BrokerContext, PartitionReplica, partition_group_id, wait_result
from raftbus.broker.queues.config import policy_for
from raftbus.broker.queues.history import HistorySigner
from raftbus.broker.queues.settings import QueueSettings
from raftbus.broker.queues.streams import StreamRegistry
from raftbus.broker.queues.model import GroupStatsView, LeasedMessages, MessageView, NewMessage, PartitionStatsView

STATES = {"ready": READY, "delayed": DELAYED, "in_flight": IN_FLIGHT, "dead": DEAD}
_PARTITION_BYTES = (64 - SEQ_BITS) // 8  # the leading bytes of a big-endian message id: its partition


class QueueService:
    def __init__(self, context: BrokerContext, settings: QueueSettings, log_settings, history_keys: list[bytes]):
        self.context = context
        self.settings = settings
        self.log_settings = log_settings  # LogSettings: the produce bounds hold for enqueues too
        self.streams = StreamRegistry()
        self.term_clock = TermClock(context.clock, settings.queue_lease_failover_grace_ms)
        self.history = HistorySigner(*history_keys)
        self._ticks: dict[str, Future] = {}
        self._waiting_lock = threading.Lock()
        self._waiting_calls = 0

    # ------------------------------------------------------------------ plumbing
    def replica(self, topic: str, partition: int) -> PartitionReplica:
        return self.context.leader_replica(topic, partition, kind="queue")

    def policy(self, topic: str) -> queue_commands.QueuePolicy:
        return policy_for(self.context.topic(topic), self.settings, self.log_settings.producer_idle_ms)

    def submit(self, replica: PartitionReplica, command: bytes):
        return wait_result(replica.group.submit(command), self.context.commit_timeout_s)

    def stamp(self, replica: PartitionReplica) -> Stamp:
        """The time stamped into the replica's commands and compared with its deadlines: term-relative and
        monotonic (broker/clock.py), never the wall clock of the moment; with the lease cutoff of the term's
        grace (queue_lease_failover_grace_ms)."""
        return self.term_clock.stamp(replica.group_id, replica.group.term, replica.state_machine.stamped_ms())

    def now_ms(self, replica: PartitionReplica) -> int:
        return self.stamp(replica).now_ms

    # ------------------------------------------------------------------ enqueue
    def enqueue(self, topic: str, partition: int, messages: list[NewMessage], *, producer_id: bytes = b"",
                base_sequence: int = 0, history_mac: bytes = b"") -> tuple[int, list[tuple[int, bool]]]:
        """(enqueued_ms, [(message_id, duplicate)]) once the batch is committed on a majority. Messages with
        history fields need the `history_mac` of a broker moving them (see history.py)."""
        self.history.check(topic, partition, self._bounded(messages, "enqueue"), history_mac)
        return self.enqueue_moved(topic, partition, messages, producer_id=producer_id, base_sequence=base_sequence)

    def enqueue_moved(self, topic: str, partition: int, messages: list[NewMessage], *, producer_id: bytes = b"",
                      base_sequence: int = 0) -> tuple[int, list[tuple[int, bool]]]:
        """enqueue() for this broker's own dead-letter moves and redrives: history fields are taken as given."""
        replica = self.replica(topic, partition)
        stamp = self.stamp(replica)
        items = [self._item(m, stamp.now_ms) for m in self._bounded(messages, "enqueue")]
        size = sum(len(i.record) for i in items)
        if size > self.log_settings.batch_bytes_max:
            raise errors.BatchTooLarge(f"enqueue of {size} record bytes exceeds batch_bytes_max="
                                       f"{self.log_settings.batch_bytes_max}")
        if len(producer_id) not in (0, 16) or base_sequence < 0:
            raise errors.InvalidArgument("producer_id must be empty or 16 bytes and base_sequence >= 0")
        command = queue_commands.encode_enqueue(stamp, self.policy(topic), items, producer_id=producer_id,
                                    base_sequence=base_sequence, runs=self.settings.queue_runs_enabled)
        result = self.submit(replica, command)
        return result.enqueued_ms, [(message_id(partition, m.seq), m.duplicate) for m in result.messages]

    def _bounded(self, items, what: str):
        if not items:
            raise errors.EmptyBatch(f"{what} needs at least one message")
        if len(items) > self.settings.queue_batch_messages_max:
            raise errors.BatchTooLarge(f"{what} of {len(items)} messages exceeds queue_batch_messages_max="
                                       f"{self.settings.queue_batch_messages_max}")
        return items

    def _item(self, m: NewMessage, now: int) -> queue_commands.EnqueueItem:
        s = self.settings
        record_bytes_max = self.log_settings.record_bytes_max
        if len(m.record) > record_bytes_max:
            raise errors.RecordTooLarge(f"message of {len(m.record)} bytes exceeds record_bytes_max={record_bytes_max}")
        group = _utf8(m.group, "group", s.queue_group_bytes_max)
        queue_commands.check_group(group)
        key = _utf8(m.idempotency_key, "idempotency_key", s.queue_idempotency_key_bytes_max)
        if key and min(key) < 0x20:
            raise errors.InvalidArgument("idempotency_key must not hold control characters")
        if not 0 <= m.deliver_at_ms <= now + s.queue_delay_max_ms:
            raise errors.InvalidArgument(f"deliver_at_ms must be 0 or a time at most queue_delay_max_ms="
                                         f"{s.queue_delay_max_ms} ahead")
        if m.origin_id:
            split_message_id(m.origin_id)
        if m.delivery_count < 0 or m.enqueued_ms < 0:
            raise errors.InvalidArgument("delivery_count and enqueued_ms must be >= 0")
        if m.delivery_count > s.queue_max_deliveries_max:
            raise errors.InvalidArgument(f"delivery_count must be at most queue_max_deliveries_max="
                                         f"{s.queue_max_deliveries_max}")
        check_framing(m.record, 1)
        return queue_commands.EnqueueItem(m.priority, m.deliver_at_ms, m.delivery_count, m.enqueued_ms, m.origin_id, group, key,
                              _utf8(m.last_error, "last_error", s.queue_nack_reason_bytes_max), m.record)

    # ------------------------------------------------------------------ lease
    def _lease_bounds(self, max_messages: int, visibility_ms: int) -> tuple[int, int]:
        s = self.settings
        if not 1 <= max_messages <= s.queue_lease_messages_max:
            raise errors.InvalidArgument(f"max_messages must be between 1 and queue_lease_messages_max="
                                         f"{s.queue_lease_messages_max}")
        visibility_ms = visibility_ms or s.queue_default_visibility_ms
        self._check_visibility(visibility_ms)
        return max_messages, visibility_ms

    def _check_visibility(self, visibility_ms: int) -> None:
        s = self.settings
        if not s.queue_visibility_min_ms <= visibility_ms <= s.queue_visibility_max_ms:
            raise errors.InvalidArgument(f"visibility_ms must be between queue_visibility_min_ms="
                                         f"{s.queue_visibility_min_ms} and queue_visibility_max_ms="
                                         f"{s.queue_visibility_max_ms}")

    def _due_now(self, replica: PartitionReplica) -> bool:
        return replica.state_machine.deliverable() or self._due_work(replica, self.stamp(replica))

    @staticmethod
    def _next_due_ms(replica: PartitionReplica, stamp: Stamp) -> int | None:
        """When the partition next has due work: a delayed delivery, or a lease expiring under the term's grace."""
        sm = replica.state_machine
        delivery, expiry = sm.next_delivery_ms(), sm.next_expiry_ms()
        if expiry is not None and stamp.kept_leases is not None and stamp.lease_expires_ms(expiry) != expiry:
            after = sm.next_expiry_after(stamp.anchor_ms)  # the earliest lease the grace does not keep
            expiry = stamp.grace_ends_ms if after is None else min(after, stamp.grace_ends_ms)
        times = [t for t in (delivery, expiry) if t is not None]
        return min(times) if times else None

    def _due_work(self, replica: PartitionReplica, stamp: Stamp) -> bool:
        due = self._next_due_ms(replica, stamp)
        return due is not None and due <= stamp.now_ms

    def _lease_now(self, replica: PartitionReplica, topic: str, max_messages: int,
                   visibility_ms: int) -> LeasedMessages:
        command = queue_commands.encode_lease(self.stamp(replica), self.policy(topic), max_messages, self.settings.queue_lease_bytes_max,
                                  visibility_ms)
        return LeasedMessages(replica.partition, self.submit(replica, command))

    def lease(self, topic: str, partition: int, *, max_messages: int, visibility_ms: int = 0,
              max_wait_ms: int = 0) -> LeasedMessages:
        """Lease up to max_messages; with max_wait_ms, wait (bounded) for one to be due when none is."""
        max_messages, visibility_ms = self._lease_bounds(max_messages, visibility_ms)
        wait_s = min(max(max_wait_ms, 0), self.settings.queue_lease_wait_max_ms) / 1000
        if wait_s <= 0:
            return self._lease_waiting(topic, partition, max_messages, visibility_ms, time.monotonic())
        with self._waiting_call():
            return self._lease_waiting(topic, partition, max_messages, visibility_ms, time.monotonic() + wait_s)

    def _lease_waiting(self, topic: str, partition: int, max_messages: int, visibility_ms: int,
                       deadline: float) -> LeasedMessages:
        while True:
            replica = self.replica(topic, partition)
            tried = self._due_now(replica)
            if tried:
                leased = self._lease_now(replica, topic, max_messages, visibility_ms)
                if leased:
                    return leased
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return LeasedMessages.none(partition)
            self._wait(replica, self._until_due_s(replica, remaining),
                       None if tried else (lambda r=replica: self._due_now(r)))

    def lease_stream(self, topic: str, partition: int, *, max_messages: int, visibility_ms: int = 0,
                     max_in_flight: int = 0, is_active: Callable[[], bool] = lambda: True
                     ) -> Iterator[LeasedMessages]:
        """Batches of leased messages as they become due, keeping at most max_in_flight leases unsettled.

        Ends when is_active() turns false; raises (NotLeader...) when this broker stops leading the partition.
        """
        max_messages, visibility_ms = self._lease_bounds(max_messages, visibility_ms)
        limit = min(max_in_flight or max_messages, self.settings.queue_stream_in_flight_max)
        window = self.streams.open(self.replica(topic, partition).group_id, max(limit, 1))
        with self._waiting_call():
            yield from self._stream(topic, partition, max_messages, visibility_ms, window, is_active)

    def _stream(self, topic, partition, max_messages, visibility_ms, window, is_active):
        try:
            while is_active():
                replica = self.replica(topic, partition)
                room = self.streams.room(window, self.now_ms(replica))
                tried = room > 0 and self._due_now(replica)
                if tried:
                    leased = self._lease_now(replica, topic, min(room, max_messages), visibility_ms)
                    if leased:
                        deadline_ms = leased.lease_deadline_ms
                        self.streams.delivered(window, [(seq, deadline_ms) for seq in leased.seqs()])
                        yield leased
                        continue
                self._wait(replica, self._stream_wait_s(replica, window, room),
                           None if tried else (lambda r=replica: self._stream_can_go(r, window)))
        finally:
            self.streams.close(window)

    @contextmanager
    def _waiting_call(self):
        """Bound the lease streams and long-polls open at once: each holds a gRPC worker thread."""
        limit = self.settings.queue_waiting_calls_max
        with self._waiting_lock:
            if self._waiting_calls >= limit:
                raise errors.Overloaded(f"too many lease streams and long-polled leases on this broker "
                                        f"(queue_waiting_calls_max={limit})")
            self._waiting_calls += 1
        try:
            yield
        finally:
            with self._waiting_lock:
                self._waiting_calls -= 1

    def _stream_can_go(self, replica: PartitionReplica, window) -> bool:
        return self.streams.room(window, self.now_ms(replica)) > 0 and self._due_now(replica)

    def _stream_wait_s(self, replica: PartitionReplica, window, room: int) -> float:
        slice_s = self.settings.queue_stream_wait_slice_ms / 1000
        if room > 0:
            return self._until_due_s(replica, slice_s)
        deadline = self.streams.earliest_deadline_ms(window)
        return slice_s if deadline is None else min(slice_s, max(deadline - self.now_ms(replica), 0) / 1000 + 0.001)

    def _until_due_s(self, replica: PartitionReplica, cap_s: float) -> float:
        stamp = self.stamp(replica)
        due = self._next_due_ms(replica, stamp)
        if due is None:
            return cap_s
        return min(cap_s, max(due - stamp.now_ms, 0) / 1000 + 0.001)

    def _wait(self, replica: PartitionReplica, timeout_s: float, ready: Callable[[], bool] | None) -> None:
        """Sleep until an apply on the partition makes `ready` true (any apply when None) or the timeout."""
        with replica.appended:
            if replica.waiters >= self.settings.queue_lease_waiters_max:
                raise errors.Overloaded(f"too many waiting leases on this partition (queue_lease_waiters_max="
                                        f"{self.settings.queue_lease_waiters_max})")
            replica.waiters += 1
            try:
                if ready is None:
                    replica.appended.wait(timeout_s)
                else:
                    replica.appended.wait_for(ready, timeout_s)
            finally:
                replica.waiters -= 1

    # ------------------------------------------------------------------ settle leases
    def _seqs(self, partition: int, ids) -> tuple[list[int | None], list]:
        """Per id: its seq, or None with a typed error when it is not a message id of this partition."""
        seqs, refusals = [], []
        for mid in ids:
            try:
                p, seq = split_message_id(mid)
                if p != partition:
                    raise errors.UnknownMessage(f"message {mid} belongs to partition {p}, not {partition}")
                seqs.append(seq)
                refusals.append(None)
            except errors.RaftbusError as exc:
                seqs.append(None)
                refusals.append(exc)
        return seqs, refusals

    def _settle(self, topic: str, partition: int, ids, encode: Callable[[list, Stamp], bytes], items: list) -> list:
        """Submit one batch command (encode(chosen items, the leader's stamp)) for the valid ids; merge its
        per-message answers with the refusals."""
        replica = self.replica(topic, partition)
        seqs, answers = self._seqs(partition, ids)
        valid = [(i, seq) for i, seq in enumerate(seqs) if seq is not None]
        if valid:
            results = self.submit(replica, encode([items[i] for i, _ in valid], self.stamp(replica)))
            for (i, _), result in zip(valid, results):
                answers[i] = _about(ids[i], result)
        return answers

    def ack(self, topic: str, partition: int, leases: list[tuple[int, int]], *, settler_id: bytes = b"",
            sequence: int = 0) -> list:
        """leases: (message_id, delivery_count). Per lease: None, UnknownMessage or LeaseLost.

        settler_id and sequence name the batch: a retry of a consumer's last batch answers as its first attempt.
        """
        self._bounded(leases, "ack")
        _check_settler(settler_id)
        ids = [mid for mid, _ in leases]
        pairs = [(mid & SEQ_MASK, count) for mid, count in leases]
        answers = self._settle(topic, partition, ids, lambda chosen, now: queue_commands.encode_ack(
            now, self.policy(topic), chosen, settler_id=settler_id, sequence=sequence), pairs)
        self._freed(topic, partition, ids, answers)
        return answers

    def ack_packed(self, topic: str, partition: int, packed: bytes, *, settler_id: bytes = b"",
                   sequence: int = 0) -> list[tuple[int, errors.RaftbusError]]:
        """Ack packed leases (proto/queues.proto: message_id >Q | delivery_count >I each); the refused ones as
        (index, error), the others are done. The hot path: when every id is of this partition the bytes become
        the command as they are, with the partition bits cleared, and nothing is done per message."""
        count = len(packed) // LEASE_REF.size
        if len(packed) % LEASE_REF.size:
            raise errors.InvalidArgument(f"packed_leases of {len(packed)} bytes are not "
                                         f"{LEASE_REF.size}-byte references")
        self._bounded(range(count), "ack")
        _check_settler(settler_id)
        replica = self.replica(topic, partition)
        if not _all_of_partition(packed, partition, count):
            answers = self.ack(topic, partition, unpack_leases(packed), settler_id=settler_id, sequence=sequence)
            return [(i, answer) for i, answer in enumerate(answers) if answer is not None]
        seq_leases = bytearray(packed)
        for position in range(_PARTITION_BYTES):
            seq_leases[position::LEASE_REF.size] = bytes(count)
        answers = self.submit(replica, queue_commands.encode_ack_packed(self.stamp(replica), self.policy(topic), bytes(seq_leases),
                                                            settler_id=settler_id, sequence=sequence))
        if self.streams.holding():
            self._freed(topic, partition, [mid for mid, _ in LEASE_REF.iter_unpack(packed)], answers)
        return [(i, _refusal(LEASE_REF.unpack_from(packed, i * LEASE_REF.size)[0], answer))
                for i, answer in enumerate(answers) if answer is not None]

    def nack(self, topic: str, partition: int, nacks: list[tuple[int, int, int | None, str]], *,
             settler_id: bytes = b"", sequence: int = 0) -> list:
        """nacks: (message_id, delivery_count, delay_ms or None for the backoff, reason); settler as for ack."""
        self._bounded(nacks, "nack")
        _check_settler(settler_id)
        s = self.settings
        items = []
        for mid, count, delay_ms, reason in nacks:
            if delay_ms is not None and not 0 <= delay_ms <= s.queue_delay_max_ms:
                raise errors.InvalidArgument(f"delay_ms must be between 0 and queue_delay_max_ms={s.queue_delay_max_ms}")
            items.append(queue_commands.Nack(mid & SEQ_MASK, count, queue_commands.BACKOFF if delay_ms is None else delay_ms,
                                 _utf8(reason, "reason", s.queue_nack_reason_bytes_max)))
        ids = [n[0] for n in nacks]
        answers = self._settle(topic, partition, ids, lambda chosen, now: queue_commands.encode_nack(
            now, self.policy(topic), chosen, settler_id=settler_id, sequence=sequence), items)
        self._freed(topic, partition, ids, answers)
        return answers

    def extend(self, topic: str, partition: int, extensions: list[tuple[int, int, int]]) -> list:
        """extensions: (message_id, delivery_count, visibility_ms). Per lease: the new deadline or an error."""
        self._bounded(extensions, "extend")
        for _, _, visibility_ms in extensions:
            self._check_visibility(visibility_ms)
        ids = [e[0] for e in extensions]
        items = [(mid & SEQ_MASK, count, visibility_ms) for mid, count, visibility_ms in extensions]
        answers = self._settle(topic, partition, ids,
                               lambda chosen, now: queue_commands.encode_extend(now, self.policy(topic), chosen), items)
        self.streams.extended(self._group_id(topic, partition), [(mid & SEQ_MASK, answer) for mid, answer in zip(ids, answers)
                                         if isinstance(answer, int)])
        return answers

    def _freed(self, topic: str, partition: int, ids, answers) -> None:
        """Give lease streams room for the leases these answers settled, and wake them."""
        if not self.streams.holding():
            return
        settled = [mid & SEQ_MASK for mid, answer in zip(ids, answers) if answer is None]
        group_id = self._group_id(topic, partition)
        replica = self.context.partitions.get(group_id)
        if self.streams.settled(group_id, settled) and replica is not None:
            replica.notify_appended()

    def _group_id(self, topic: str, partition: int) -> str:
        return partition_group_id(self.context.topic(topic).topic_id, partition)

    # ------------------------------------------------------------------ per-message operations
    def get(self, topic: str, mid: int) -> MessageView:
        partition, seq = split_message_id(mid)
        message = self.replica(topic, partition).state_machine.get(seq)
        if message is None:
            raise unknown_message(mid)
        return MessageView.of(partition, seq, message)

    def delete(self, topic: str, partition: int, ids: list[int]) -> list:
        """Delete (cancel) messages in any state; a leased one is gone too and its holder's ack is refused."""
        self._bounded(ids, "delete")
        answers = self._settle(topic, partition, ids,
                               lambda chosen, now: queue_commands.encode_delete(now, self.policy(topic), chosen),
                               [mid & SEQ_MASK for mid in ids])
        self._freed(topic, partition, ids, answers)
        return answers

    def change_priority(self, topic: str, mid: int, *, priority: int | None = None,
                        deliver_at_ms: int | None = None) -> MessageView:
        """Give a message a new priority and/or delivery time (a leased message keeps its lease; only a ready or
        delayed one can be rescheduled)."""
        if priority is None and deliver_at_ms is None:
            raise errors.InvalidArgument("change_priority needs a priority, a deliver_at_ms or both")
        partition, seq = split_message_id(mid)
        replica = self.replica(topic, partition)
        stamp = self.stamp(replica)
        if deliver_at_ms is not None and not 0 <= deliver_at_ms <= stamp.now_ms + self.settings.queue_delay_max_ms:
            raise errors.InvalidArgument(f"deliver_at_ms must be 0 or a time at most queue_delay_max_ms="
                                         f"{self.settings.queue_delay_max_ms} ahead")
        try:
            changed = self.submit(replica, queue_commands.encode_change(stamp, self.policy(topic), seq, priority,
                                                                        deliver_at_ms))
        except errors.UnknownMessage:
            raise unknown_message(mid) from None
        return MessageView.of(partition, seq, changed)

    def peek(self, topic: str, partition: int, *, state: str = "ready", max_messages: int = 10) -> list[MessageView]:
        """Messages in `state` without leasing them: ready ones in delivery order (fair topics: by group)."""
        if state not in STATES:
            raise errors.InvalidArgument(f"state must be one of {sorted(STATES)}, not {state!r}")
        if not 1 <= max_messages <= self.settings.queue_peek_messages_max:
            raise errors.InvalidArgument(f"max_messages must be between 1 and queue_peek_messages_max="
                                         f"{self.settings.queue_peek_messages_max}")
        replica = self.replica(topic, partition)
        return [MessageView.of(partition, seq, m) for seq, m in replica.state_machine.peek(STATES[state], max_messages)]

    def scan(self, topic: str, partition: int, *, after_message_id: int = 0,
             max_messages: int = 100) -> list[MessageView]:
        """Messages of every state after `after_message_id` (0: from the first), in id order: a full read in pages
        (backups). max_messages is bounded by queue_peek_messages_max."""
        if not 1 <= max_messages <= self.settings.queue_peek_messages_max:
            raise errors.InvalidArgument(f"max_messages must be between 1 and queue_peek_messages_max="
                                         f"{self.settings.queue_peek_messages_max}")
        after_seq = 0
        if after_message_id:
            at, after_seq = split_message_id(after_message_id)
            if at != partition:
                raise errors.InvalidArgument(f"message {after_message_id} belongs to partition {at}, not {partition}")
        replica = self.replica(topic, partition)
        return [MessageView.of(partition, seq, m) for seq, m in replica.state_machine.scan(after_seq, max_messages)]

    def stats(self, topic: str, partition: int) -> PartitionStatsView:
        replica = self.replica(topic, partition)
        s = self.settings
        raw = replica.state_machine.stats(s.queue_stats_groups_max, s.queue_stats_scan_max)
        now = self.now_ms(replica)

        def age(enqueued_ms):
            return None if enqueued_ms is None else max(now - enqueued_ms, 0)

        groups = tuple(GroupStatsView(g.group.decode("utf-8", errors="replace"), g.ready, g.delayed, g.in_flight,
                                      g.dead, age(g.oldest_ready_enqueued_ms)) for g in raw.groups)
        return PartitionStatsView(partition, raw.ready, raw.delayed, raw.in_flight, raw.dead,
                                  age(raw.oldest_ready_enqueued_ms), raw.next_delivery_ms, raw.enqueued_total, groups,
                                  raw.groups_truncated)

    # ------------------------------------------------------------------ due work (leader, loop thread)
    def tick_if_due(self, replica: PartitionReplica, topic) -> None:
        """Submit a tick when the partition has due work and no tick of ours is still pending."""
        pending = self._ticks.get(replica.group_id)
        if pending is not None and not pending.done():
            return
        stamp = self.stamp(replica)  # anchors the term's clock as soon as the new leader has caught up
        if not self._due_work(replica, stamp) or topic.queue is None:
            self._ticks.pop(replica.group_id, None)
            return
        self._ticks[replica.group_id] = replica.group.submit(queue_commands.encode_tick(
            stamp, policy_for(topic, self.settings, self.log_settings.producer_idle_ms)))

    def forget(self, group_id: str) -> None:
        self._ticks.pop(group_id, None)
        self.term_clock.forget(group_id)



def _check_settler(settler_id: bytes) -> None:
    if len(settler_id) not in (0, 16):
        raise errors.InvalidArgument("settler_id must be empty or 16 bytes")


def _utf8(text: str, what: str, bytes_max: int) -> bytes:
    if not isinstance(text, str):
        raise errors.InvalidArgument(f"{what} must be a string")
    raw = text.encode()
    if len(raw) > bytes_max:
        raise errors.InvalidArgument(f"{what} of {len(raw)} bytes exceeds {bytes_max} bytes")
    return raw


def _all_of_partition(packed: bytes, partition: int, count: int) -> bool:
    """Whether every packed lease names a message id of `partition` (its top bytes), checked without a loop."""
    top = partition.to_bytes(_PARTITION_BYTES, "big")
    return all(packed[i::LEASE_REF.size] == top[i:i + 1] * count for i in range(_PARTITION_BYTES))


def _refusal(mid: int, answer: errors.RaftbusError) -> errors.RaftbusError:
    """A packed ack's refusal, named as a per-message ack would: an id without a seq is not a message id."""
    if isinstance(answer, errors.UnknownMessage) and not mid & SEQ_MASK:
        return errors.InvalidArgument(f"{mid!r} is not a queue message id")
    return _about(mid, answer)


def _about(mid: int, answer):
    """Name the message in a per-message error."""
    if isinstance(answer, errors.UnknownMessage):
        return unknown_message(mid)
    if isinstance(answer, errors.RaftbusError):
        return type(answer)(f"message {mid}: {answer.message}")
    return answer


def unknown_message(mid: int) -> errors.UnknownMessage:
    """The one wording of UNKNOWN_MESSAGE, whichever call meets it (get, delete, change priority, ack, ...)."""
    return errors.UnknownMessage(f"message {mid} does not exist (acked, deleted, dead-lettered or never enqueued)")
