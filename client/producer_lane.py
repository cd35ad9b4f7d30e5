"""One partition's idempotent-producer rules without I/O: the core that every produce path drives.

Producer, its queue sender, AsyncProducer and the Spark sink keep one PartitionLane per (topic, partition) they
write. The lane owns, for that partition, the producer id in use, the next sequence, the batches waiting to be
sent, the batches in flight (in send order) and the ones held for a resend. The caller (an I/O shell: a thread,
an event loop, a Spark task) hands it events — batches queued, an answer, a refusal, a fresh producer id — and
carries out what it returns: the batches to send now, `Complete` (settle a batch with the broker's answer),
`Fail` (settle it with a typed error), `RENEW` (start over under a fresh producer id, then call `renew`). The lane
reads no clock (times are passed in), makes no call, takes no lock and draws no random bytes; the caller
serialises its calls. Its work is per batch, never per record.

The rules:

- **Sequences.** A batch gets its `sequence` (the records sent to the partition before it under the lane's
  producer id) and that id when first sent, and keeps both, with its bytes, on every resend. The broker
  answers a resent batch it already appended as a duplicate with the original offsets; the lane completes it
  with that answer like any other.
- **In flight.** At most `in_flight_max` batches, answered in any order. After a refusal nothing new is sent
  until every batch in flight has answered (the lane has drained); then the refused batches go again first,
  in sequence order, with their sequences.
- **Retries.** A refused batch is held for a resend after `delay_s`, the wait the caller's router allows for
  the error (OUT_OF_ORDER_SEQUENCE: an earlier batch is missing, resent first). It fails for good when there is
  no delay (the error is final, or the retries are spent) or when the resend would land past its delivery
  deadline (`created_s + delivery_timeout_s`).
- **Failing for good.** The batch fails with its error; once drained, the batches held behind it fail with the
  same error (their outcome may be unknown: resending them could reorder or duplicate records), and the lane
  starts over under a fresh producer id from sequence 0, renumbering the queued batches; nothing new is sent
  meanwhile. Later batches so neither wait for a sequence that will never come nor meet one whose outcome is
  unknown.
- **UNKNOWN_PRODUCER_ID.** When, once drained, the first held batch was refused so, every batch before it was
  acknowledged and the partition holds no state for this producer id (it expired after the broker's
  `producer_idle_ms`, or was trimmed): the lane starts over under a fresh producer id from sequence 0 with the
  held and queued batches, in order, failing none. A later batch refused so behind one refused otherwise is
  simply resent after it (the partition had not seen the earlier batch yet).
- **A replayed producer id** (`replayed=True`, the Spark sink's id derived from the piece of work, which an
  earlier attempt may have written under): OUT_OF_ORDER_SEQUENCE on the first outstanding batch (every batch
  before it acknowledged) means the broker expects more than this batch's base, which only that earlier attempt
  can have appended — with the same batch boundaries, so it appended this batch. The lane completes it with no
  answer (`answer=None`: already written, offsets unknown), whatever its deadline. This holds only under the id
  the lane was given, never after a restart.
- **Stale answers.** An answer for a batch that is not in flight, or for an earlier send of a batch sent again
  since, changes nothing.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from raftbus.client.errors import OutOfOrderSequence, RaftbusError, UnknownProducerId


class LaneBatch:
    """What the lane reads and writes on a batch; each path's batch class extends it."""

    __slots__ = ("created_s", "sequence", "producer_id", "attempts", "retry_at_s")

    def __init__(self, created_s: float):
        self.created_s = created_s
        self.sequence: int | None = None  # fixed when first sent under a producer id
        self.producer_id = b""
        self.attempts = 0  # sends so far; an answer names the send it answers
        self.retry_at_s = 0.0

    def record_count(self) -> int:
        """Records (or queue messages) in the batch: what its sequence advances the next one's by."""
        raise NotImplementedError


class Complete(NamedTuple):
    """Settle `batch` with the broker's `answer` (None: written by an earlier attempt, offsets unknown)."""

    batch: Any
    answer: Any


class Fail(NamedTuple):
    """Settle `batch` with `error`; `timed_out`: its delivery deadline passed while `error` was retriable."""

    batch: Any
    error: RaftbusError
    timed_out: bool = False


class RenewProducerId(NamedTuple):
    """Start the lane over: the caller obtains a fresh producer id and calls `lane.renew(it)`."""


RENEW = RenewProducerId()

# when a never-sent batch may go: (batch, batches queued) -> a time (at or before now: at once)
DueS = Callable[[Any, int], float]


class PartitionLane:
    """One partition's producer state and rules; see the module docstring."""

    __slots__ = ("producer_id", "epoch", "next_sequence", "in_flight_max", "delivery_timeout_s", "replayed",
                 "queue", "in_flight", "held", "restart", "renewing")

    def __init__(self, producer_id: bytes, *, in_flight_max: int = 1, delivery_timeout_s: float = 120.0,
                 replayed: bool = False):
        self.producer_id = producer_id
        self.epoch = 0  # producer ids this lane has started over under
        self.next_sequence = 0
        self.in_flight_max = in_flight_max
        self.delivery_timeout_s = delivery_timeout_s
        self.replayed = replayed
        self.queue: deque = deque()  # to send, in order: resends (with their sequences) first, then new batches
        self.in_flight: list = []  # sent and unanswered, in send order
        self.held: list[tuple[Any, RaftbusError]] = []  # refused, waiting for the in-flight ones to answer
        self.restart: RaftbusError | None = None  # why a batch failed for good: start over once drained
        self.renewing = False  # RENEW returned, no fresh id yet

    # ------------------------------------------------------------------ sending
    def idle(self) -> bool:
        """Nothing in flight, held or waiting for a fresh producer id."""
        return not self.in_flight and not self.held and not self.renewing

    def may_send(self) -> bool:
        """Whether the head of the queue may go once due: room in flight and no failure being sorted out."""
        return (len(self.in_flight) < self.in_flight_max and not self.held and not self.renewing
                and self.restart is None)

    def take(self, now_s: float, due_s: DueS) -> tuple[list, float | None]:
        """The batches to send now, in order, each stamped with its producer id and sequence; and when the next
        one falls due (None: none is waiting for a time). A resent batch is due at its `retry_at_s`, a new one
        when `due_s` says."""
        sent = []
        queue, in_flight = self.queue, self.in_flight
        while queue and len(in_flight) < self.in_flight_max and not self.held and not self.renewing \
                and self.restart is None:  # may_send(), inlined: this runs for every batch
            head = queue[0]
            at_s = head.retry_at_s if head.attempts else due_s(head, len(queue))
            if at_s > now_s:
                return sent, at_s
            sent.append(self.send_head())
        return sent, None

    def send_head(self):
        """Send the queue's head now (the caller checked `may_send`): stamp it, count it in flight."""
        batch = self.queue.popleft()
        if batch.sequence is None:
            batch.sequence = self.next_sequence
            batch.producer_id = self.producer_id
            self.next_sequence += batch.record_count()
        batch.attempts += 1
        self.in_flight.append(batch)
        return batch

    # ------------------------------------------------------------------ answers
    def acked(self, batch, attempt: int, answer) -> list:
        """Send `attempt` of `batch` was acknowledged (appended, or recognised as a duplicate) with `answer`."""
        if not self._answered(batch, attempt):
            return []
        actions: list = [Complete(batch, answer)]
        if not self.in_flight and (self.held or self.restart is not None):
            self._drain(actions)
        return actions

    def refused(self, batch, attempt: int, error: RaftbusError, now_s: float, delay_s: float | None) -> list:
        """Send `attempt` of `batch` failed with `error`; `delay_s` is the wait before a resend that the caller's
        router allows for it (None: final)."""
        if not self._answered(batch, attempt):
            return []
        actions: list = []
        if self._written_before(batch, error):
            actions.append(Complete(batch, None))
        elif delay_s is None or now_s + delay_s >= batch.created_s + self.delivery_timeout_s:
            actions.append(Fail(batch, error, delay_s is not None))
            if self.restart is None:
                self.restart = error
        else:
            batch.retry_at_s = now_s + delay_s
            self.held.append((batch, error))
        if not self.in_flight:
            self._drain(actions)
        return actions

    def renew(self, producer_id: bytes) -> None:
        """Start over under `producer_id` (after RENEW): sequences from 0, queued batches renumbered when sent."""
        self.producer_id = producer_id
        self.epoch += 1
        self.next_sequence = 0
        for batch in self.queue:
            batch.sequence = None
        self.renewing = False

    def abandon(self, error: RaftbusError) -> list[Fail]:
        """Fail every batch not in flight (queued or held), e.g. when the producer closes before sending them."""
        dropped = [*(batch for batch, _ in self.held), *self.queue]
        self.held = []
        self.queue.clear()
        return [Fail(batch, error) for batch in dropped]

    def _answered(self, batch, attempt: int) -> bool:
        """Take `batch` out of flight if this answers its current send; False for a stale answer."""
        if batch.attempts != attempt:
            return False
        in_flight = self.in_flight
        if in_flight and in_flight[0] is batch:  # the oldest answers first, as a stream answers in order
            del in_flight[0]
            return True
        for i, sent in enumerate(in_flight):
            if sent is batch:
                del in_flight[i]
                return True
        return False

    def _drain(self, actions: list) -> None:
        """Nothing is in flight any more: decide what the held batches become (see the module docstring)."""
        held = sorted(self.held, key=_sequence_of)
        self.held = []
        if self.restart is not None:
            reason, self.restart = self.restart, None
            actions.extend(Fail(batch, reason) for batch, _ in held)
            self._start_over(actions)
            return
        if held and self._written_before(*held[0]):
            actions.append(Complete(held.pop(0)[0], None))
        if not held:
            return
        self.queue.extendleft(reversed([batch for batch, _ in held]))
        if isinstance(held[0][1], UnknownProducerId):
            for batch, _ in held:
                batch.retry_at_s = 0.0  # a fresh id has nothing to wait for
            self._start_over(actions)

    def _written_before(self, batch, error: RaftbusError) -> bool:
        """Whether OUT_OF_ORDER_SEQUENCE on `batch` means an earlier attempt of a replayed producer id wrote it:
        it is the first outstanding batch (none before it in flight or held, none failed for good)."""
        if not self.replayed or self.epoch or self.restart is not None or not isinstance(error, OutOfOrderSequence):
            return False
        sequence = batch.sequence
        return all(sent.sequence > sequence for sent in self.in_flight) and \
            all(other.sequence > sequence for other, _ in self.held)

    def _start_over(self, actions: list) -> None:
        self.renewing = True
        actions.append(RENEW)


def _sequence_of(held: tuple) -> int:
    return held[0].sequence
