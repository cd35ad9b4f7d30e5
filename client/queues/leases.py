"""Keeping a queue consumer's leases alive while it holds them, and handing out only messages with time left.

A consumer holds each leased message from its arrival until the application acks or nacks it: first in the
prefetch buffer, then in the application's hands. A lease lasts `visibility_ms`; a message that waits longer
than that in the buffer (the application settles the messages before it one by one) would expire before the
application sees it, be leased again, and its late ack refused. `LeaseKeeper` prevents that, as Google Pub/Sub's
clients do: it tracks every held message's lease deadline on this process's monotonic clock and says, each
round, which leases to renew with one Extend per partition, so a message stays leased to this consumer however
long it waits, up to `extension_max_ms` after its arrival. `take` refuses to hand out a message whose lease has
less than `handoff_margin_ms` left (an extend failed, or the maximum was reached); the consumer gives it back.

The deadlines are estimates on the local clock, never the broker's (its clock may be skewed from ours): a lease's
deadline is taken as its arrival plus visibility_ms (the lease was stamped a commit and a network trip earlier,
which the margins cover), an extended one as the time the extend was asked for plus the visibility it asked, or,
when the answer came later than the hand-off margin after the ask (the call waited for a new partition leader),
its answer less the hand-off margin plus the visibility. A lease whose extend is still unanswered is kept past
its deadline until the answer says whether the broker renewed it: a new partition leader keeps leases that ran
out while the partition had none for `queue_lease_failover_grace_ms`, so the renewal held up by the failover
can still succeed (docs/queues.md, Leases across a failover).

Pure bookkeeping under one lock, with the time passed in: the sync and asyncio consumers drive it.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from raftbus.client import settings
from raftbus.client.errors import InvalidArgument, LeaseLost, Unavailable, UnknownMessage
from raftbus.client.queues.messages import Message

# take(): hand it out; give it back; it is no longer held; keep it buffered until its extend is answered
HANDED, ENDING, GONE, WAITING = "handed", "ending", "gone", "waiting"
ENDING_REASON = "lease ending before the consumer handed the message out"


@dataclass(frozen=True, slots=True)
class LeasePolicy:
    """How a consumer keeps its leases; every figure in ms of the consumer's monotonic clock."""

    visibility_ms: int
    extension_max_ms: int        # no extension takes a lease past this long after the message arrived; 0 = never
    extension_margin_ms: int     # a partition's leases are renewed when one has less than this left
    handoff_margin_ms: int       # a message with less than this left is not handed to the application

    @classmethod
    def of(cls, visibility_ms: int, extension_max_ms: int, extension_margin_ms: int | None,
           handoff_margin_ms: int | None) -> "LeasePolicy":
        """The policy of a consumer's arguments; None margins derive from visibility_ms (half of it, at most
        QUEUE_LEASE_EXTENSION_MARGIN_MS; the hand-off margin half the extension margin). InvalidArgument unless
        0 < handoff margin < extension margin < visibility_ms and extension_max_ms >= 0."""
        if not isinstance(visibility_ms, int) or visibility_ms < 1:
            raise InvalidArgument("visibility_ms must be a positive number of milliseconds")
        if extension_margin_ms is None:
            extension_margin_ms = min(settings.QUEUE_LEASE_EXTENSION_MARGIN_MS, visibility_ms // 2)
        if handoff_margin_ms is None:
            handoff_margin_ms = extension_margin_ms // 2
        if not 0 < handoff_margin_ms < extension_margin_ms < visibility_ms:
            raise InvalidArgument(f"lease margins must satisfy 0 < lease_handoff_margin_ms ({handoff_margin_ms}) < "
                                  f"lease_extension_margin_ms ({extension_margin_ms}) < visibility_ms "
                                  f"({visibility_ms})")
        if extension_max_ms < 0:
            raise InvalidArgument("lease_extension_max_ms must be >= 0 (0: never extend)")
        return cls(visibility_ms, extension_max_ms, extension_margin_ms, handoff_margin_ms)


@dataclass(frozen=True, slots=True)
class LeaseCounts:
    """What a consumer's lease keeping did so far."""

    extend_requests: int     # Extend requests sent by the keeper (one per partition and round)
    extensions: int          # leases they renewed
    extensions_refused: int  # leases the broker no longer held when asked (LEASE_LOST, UNKNOWN_MESSAGE)
    expired_unhanded: int    # messages whose lease ran out before the application took them (dropped)
    returned_unhanded: int   # messages given back (nack, no delay) with less than the hand-off margin left


class _Held:
    __slots__ = ("message", "arrived_ms", "deadline_ms", "extending")

    def __init__(self, message: Message, arrived_ms: int, deadline_ms: int):
        self.message = message
        self.arrived_ms = arrived_ms
        self.deadline_ms = deadline_ms
        self.extending = False


def _lease(message: Message) -> tuple[int, int]:
    return message.message_id, message.delivery_count


class LeaseKeeper:
    """The leases a consumer holds, per partition, with their local deadlines (see the module docstring)."""

    def __init__(self, policy: LeasePolicy, on_released: Callable[[], None] | None = None):
        self.policy = policy
        self._on_released = on_released or (lambda: None)
        self._lock = threading.Lock()
        self._held: dict[tuple[str, int], dict[tuple[int, int], _Held]] = {}
        self._counts = [0, 0, 0, 0, 0]  # LeaseCounts' fields in order

    # ------------------------------------------------------------------ arrivals and settlements
    def received(self, messages: list[Message], now_ms: int) -> None:
        """Leased messages just arrived from a lease stream."""
        deadline = now_ms + self.policy.visibility_ms
        with self._lock:
            for message in messages:
                held = self._held.setdefault((message.topic, message.partition), {})
                held[_lease(message)] = _Held(message, now_ms, deadline)

    def release(self, message: Message) -> None:
        """The application acked or nacked the message: it is not kept any more."""
        if self._drop(message):
            self._on_released()

    def held(self, topic: str, partition: int) -> int:
        """How many leases of the partition this consumer holds (buffered or handed out, not settled)."""
        with self._lock:
            return len(self._held.get((topic, partition), ()))

    def counts(self) -> LeaseCounts:
        with self._lock:
            return LeaseCounts(*self._counts)

    # ------------------------------------------------------------------ hand-off
    def take(self, message: Message, now_ms: int) -> str:
        """Whether a buffered message may go to the application: HANDED (it keeps being kept), ENDING (less than
        the hand-off margin left: no longer kept, give it back), GONE (its lease ran out or was refused) or
        WAITING (less than the margin left and an extend of it unanswered: keep it buffered until the answer)."""
        with self._lock:
            entry = self._held.get((message.topic, message.partition), {}).get(_lease(message))
            if entry is None:
                return GONE  # counted when it was dropped
            if entry.deadline_ms - now_ms >= self.policy.handoff_margin_ms:
                return HANDED
            if entry.extending:
                return WAITING
            verdict = ENDING if entry.deadline_ms > now_ms else GONE
            self._counts[4 if verdict == ENDING else 3] += 1
        self.release(message)
        return verdict

    def hand_over(self, message: Message, now_ms: int, handed: list[Message], waiting: list[Message],
                  give_back: Callable[[Message], None]) -> None:
        """Sort a buffered message by `take`: into `handed` (for the application), into `waiting` (to buffer
        again after this poll), to `give_back`, or nowhere (its lease is gone)."""
        verdict = self.take(message, now_ms)
        if verdict == HANDED:
            handed.append(message)
        elif verdict == WAITING:
            waiting.append(message)
        elif verdict == ENDING:
            give_back(message)

    # ------------------------------------------------------------------ extension rounds
    def due(self, now_ms: int) -> list[tuple[tuple[str, int], list[Message]]]:
        """The leases to renew now, per partition: when a partition's earliest renewable lease has less than the
        extension margin left, every renewable lease of it with less than half of visibility_ms, or twice the
        margin, left (one Extend then renews them together; a lease not renewed has at least twice the margin
        left, so the partition's next round is at least one margin later, however densely leases arrived). Renewable: not being extended already, and renewing it now keeps it within
        extension_max_ms of its arrival. Leases past their deadline are forgotten first. The returned leases are
        marked as being extended until `extend_answered`; a lease past its deadline with an extend unanswered
        stays until the answer."""
        p = self.policy
        rounds, expired = [], 0
        with self._lock:
            for tp, held in self._held.items():
                for key in [key for key, entry in held.items() if entry.deadline_ms <= now_ms and not entry.extending]:
                    del held[key]
                    expired += 1
                renewable = [entry for entry in held.values() if not entry.extending
                             and now_ms + p.visibility_ms <= entry.arrived_ms + p.extension_max_ms]
                if not renewable or min(e.deadline_ms for e in renewable) - now_ms >= p.extension_margin_ms:
                    continue
                window = min(p.visibility_ms, max(p.visibility_ms // 2, 2 * p.extension_margin_ms))
                chosen = [e for e in renewable if e.deadline_ms - now_ms < window]
                for entry in chosen:
                    entry.extending = True
                self._counts[0] += 1
                rounds.append((tp, [entry.message for entry in chosen]))
            self._counts[3] += expired
        if expired:
            self._on_released()
        return rounds

    def next_due_ms(self, now_ms: int) -> int | None:
        """When `due` may next have work (a lease reaching its margin or its deadline); None when none is held
        but leases being extended (their answers decide what comes next)."""
        p = self.policy
        soonest = None
        with self._lock:
            for held in self._held.values():
                for entry in held.values():
                    if entry.extending:
                        continue
                    renewable = now_ms + p.visibility_ms <= entry.arrived_ms + p.extension_max_ms
                    at = entry.deadline_ms - p.extension_margin_ms if renewable else entry.deadline_ms
                    soonest = at if soonest is None or at < soonest else soonest
        return soonest

    def extend_answered(self, message: Message, asked_ms: int, visibility_ms: int,
                        error: BaseException | None, answered_ms: int | None = None) -> None:
        """An extend of the message (the keeper's or the application's), asked at asked_ms, was answered (at
        answered_ms, when known)."""
        refused = isinstance(error, (LeaseLost, UnknownMessage))
        with self._lock:
            entry = self._held.get((message.topic, message.partition), {}).get(_lease(message))
            if entry is None:
                return
            if entry.extending:
                entry.extending = False
                if error is None:
                    self._counts[1] += 1
            if error is None:
                renewed_ms = asked_ms if answered_ms is None else \
                    max(asked_ms, answered_ms - self.policy.handoff_margin_ms)
                entry.deadline_ms = renewed_ms + visibility_ms
            elif refused:
                self._counts[2] += 1
        if refused:
            self.release(message)

    def _drop(self, message: Message) -> bool:
        with self._lock:
            held = self._held.get((message.topic, message.partition))
            return held is not None and held.pop(_lease(message), None) is not None


class KeptSettler:
    """The settler a keeping consumer gives its messages: an ack or nack ends the keeping of the message, an
    extend the application asks for moves its kept deadline; the requests themselves go through `settlements`
    (batched per partition), whose futures (concurrent or asyncio) are returned."""

    def __init__(self, settlements, keeper: LeaseKeeper, now_ms: Callable[[], int]):
        self.settlements = settlements
        self.keeper = keeper
        self.now_ms = now_ms

    def ack(self, message: Message):
        self.keeper.release(message)
        return self.settlements.ack(message)

    def nack(self, message: Message, delay_ms: int | None, reason: str):
        self.keeper.release(message)
        return self.settlements.nack(message, delay_ms, reason)

    def extend(self, message: Message, visibility_ms: int):
        asked_ms = self.now_ms()
        future = self.settlements.extend(message, visibility_ms)
        future.add_done_callback(lambda f: self.keeper.extend_answered(message, asked_ms, visibility_ms,
                                                                       _error_of(f), self.now_ms()))
        return future


def extend_round(settlements, keeper: LeaseKeeper, messages: list[Message], now_ms: int,
                 clock_ms: Callable[[], int] | None = None) -> list:
    """Ask for one round's extensions of one partition (one request: `settlements.extend_many`); each answer goes
    back to the keeper, with the time it came on `clock_ms`. The futures, for whoever wants to wait."""
    visibility_ms = keeper.policy.visibility_ms
    futures = settlements.extend_many(messages, visibility_ms)
    for message, future in zip(messages, futures):
        future.add_done_callback(lambda f, m=message: keeper.extend_answered(
            m, now_ms, visibility_ms, _error_of(f), None if clock_ms is None else clock_ms()))
    return futures


def keep_leases_round(settlements, keeper: LeaseKeeper, clock_ms: Callable[[], int]) -> float | None:
    """One round of a consumer's lease keeper: renew what is due (one Extend per partition), then the seconds to
    sleep until the next lease is due (at most QUEUE_LEASE_CHECK_MAX_MS); None once the settlements are closed.
    The sync consumer's thread and the asyncio consumer's task loop over it, each sleeping its own way."""
    now = clock_ms()
    try:
        for _, messages in keeper.due(now):
            extend_round(settlements, keeper, messages, now, clock_ms)
    except Unavailable:
        return None  # closed
    upcoming = keeper.next_due_ms(clock_ms())
    wait_ms = settings.QUEUE_LEASE_CHECK_MAX_MS if upcoming is None else upcoming - clock_ms()
    return min(max(wait_ms, 1), settings.QUEUE_LEASE_CHECK_MAX_MS) / 1000


def _error_of(future) -> BaseException | None:
    if future.cancelled():
        return Unavailable("extend cancelled")
    return future.exception()
