"""A consumer's heartbeat thread: keeps the member alive and tells the consumer when its assignment moved.

Each heartbeat long-polls the controller for up to one heartbeat interval and comes back early when the group's
generation differs from the member's, so a rebalance reaches the member at once. The thread never touches the
assignment itself: it flags the consumer (`on_rebalance`, `on_unknown`) and waits, on the consumer's condition,
until the consumer has synced to a new generation or the interval has passed.

Every heartbeat is one cancellable call: `stop` cancels the one in flight, so closing a consumer never waits
for a long-poll. A failed call is not retried at once; NOT_LEADER hints and refreshes go through the router.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import grpc

from raftbus.client.errors import RaftbusError, UnknownGroup, UnknownMember, error_from_rpc
from raftbus.client.groups.calls import GroupCalls

log = logging.getLogger(__name__)

MemberState = Callable[[], tuple[str, int]]  # (member_id, generation) as the consumer knows them now


class Heartbeat:
    def __init__(self, calls: GroupCalls, group: str, member: MemberState, wake: threading.Condition, *,
                 interval_ms: int, on_rebalance: Callable[[], None], on_unknown: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic):
        self.calls = calls
        self.group = group
        self.interval_s = interval_ms / 1000
        self.last_error: RaftbusError | None = None
        self._member = member
        self._wake = wake
        self._on_rebalance = on_rebalance
        self._on_unknown = on_unknown
        self._clock = clock
        self._failures = 0
        self._call = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"raftbus-heartbeat-{group}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        """Stop the thread, cancelling the heartbeat in flight."""
        self._stopping.set()
        with self._lock:
            if self._call is not None:
                self._call.cancel()
        with self._wake:
            self._wake.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stopping.is_set():
            member_id, generation = self._member()
            if not member_id:
                self._wait_for_change((member_id, generation), self.interval_s)
                continue
            self._beat(member_id, generation)

    def _beat(self, member_id: str, generation: int) -> None:
        started = self._clock()
        try:
            latest, rebalance = self._send(member_id, generation)
        except grpc.FutureCancelledError:
            return  # stopping
        except (UnknownMember, UnknownGroup) as err:
            self.last_error = err
            self._on_unknown(member_id)
            self._wait_for_change((member_id, generation), self.interval_s)
            return
        except RaftbusError as err:
            self._failed(err)
            return
        self.last_error, self._failures = None, 0
        if rebalance and self._member() == (member_id, generation):
            self._on_rebalance()
            self._wait_for_change((member_id, generation), self.interval_s)
            return
        left_s = self.interval_s - (self._clock() - started)
        if left_s > 0 and not rebalance:  # answered without waiting (the controller was busy): keep the pace
            self._stopping.wait(left_s)

    def _send(self, member_id: str, generation: int) -> tuple[int, bool]:
        call = self.calls.heartbeat_call(self.group, member_id, generation, int(self.interval_s * 1000))
        with self._lock:
            self._call = call
        if self._stopping.is_set():
            call.cancel()
        try:
            response = call.result()
        except grpc.RpcError as exc:
            if call.cancelled():
                raise grpc.FutureCancelledError() from None
            raise error_from_rpc(exc) from None
        finally:
            with self._lock:
                self._call = None
        return response.generation, response.rebalance

    def _failed(self, err: RaftbusError) -> None:
        """Learn the controller's new address from the error and wait before the next heartbeat."""
        self.last_error = err
        self._failures += 1
        delay_s = self.calls.router.note_failure(err, min(self._failures, self.calls.router.retries))
        log.debug("heartbeat failed (%s); next in %s s", err, delay_s)
        self._stopping.wait(min(self.interval_s, delay_s if delay_s is not None else self.interval_s))

    def _wait_for_change(self, seen: tuple[str, int], timeout_s: float) -> None:
        with self._wake:
            self._wake.wait_for(lambda: self._stopping.is_set() or self._member() != seen, timeout_s)
