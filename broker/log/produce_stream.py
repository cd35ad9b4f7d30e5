"""The bidi produce stream, pipelined: every request is proposed as soon as it arrives, in arrival order, and
each answer is streamed as soon as its batch commits, so a producer can keep several batches per partition in
flight on one stream without reordering them.

A reader thread pulls requests and submits them (a bad one is answered at once with an error entry and the
stream goes on); answers come back through a queue in completion order, each carrying its `request_id`.
At most `in_flight_max` requests are unanswered at a time (the reader stops pulling until one completes: the
client's sends block in gRPC flow control), and one not committed within `timeout_s` is answered
REQUEST_TIMED_OUT.
"""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future

from raftbus.client import errors
from raftbus.client.wire import raftbus_pb2 as pb

POLL_S = 0.1  # how often a waiting stream checks that its client is still there and for timed-out requests
_END = object()


def error_response(request: pb.ProduceRequest, error: errors.RaftbusError) -> pb.ProduceResponse:
    return pb.ProduceResponse(request_id=request.request_id, topic=request.topic, partition=request.partition,
                              error=pb.Error(code=error.code, message=error.message, leader_id=error.leader_id or 0,
                                             leader_address=error.leader_address or ""))


def result_response(request: pb.ProduceRequest, result) -> pb.ProduceResponse:
    return pb.ProduceResponse(request_id=request.request_id, topic=request.topic, partition=request.partition,
                              base_offset=result.base_offset, duplicate=result.duplicate,
                              append_time_ms=result.append_time_ms)


class ProducePipeline:
    """Serves one ProduceStream call (see the module docstring)."""

    def __init__(self, submit: Callable[[pb.ProduceRequest], Future], *, in_flight_max: int, timeout_s: float,
                 typed: Callable[[Exception], errors.RaftbusError]):
        self._submit = submit
        self._typed = typed
        self._timeout_s = timeout_s
        self._slots = threading.BoundedSemaphore(in_flight_max)
        self._answers: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[float, pb.ProduceRequest]] = {}  # id(request) -> (deadline, request)
        self._closed = threading.Event()
        self._unanswered = 0  # requests read and not yet answered on the stream

    def run(self, requests: Iterator[pb.ProduceRequest], is_active: Callable[[], bool]):
        reader = threading.Thread(target=self._read, args=(requests,), name="raftbus-produce-stream", daemon=True)
        reader.start()
        reading = True
        try:
            while reading or self._outstanding():
                try:
                    item = self._answers.get(timeout=POLL_S)
                except queue.Empty:
                    if not is_active():
                        return
                    for answer in self._expired():
                        self._answered()
                        yield answer
                    continue
                if item is _END:
                    reading = False
                    continue
                self._answered()
                yield item
        finally:
            self._closed.set()

    def _outstanding(self) -> int:
        with self._lock:
            return self._unanswered

    def _answered(self) -> None:
        with self._lock:
            self._unanswered -= 1

    # ------------------------------------------------------------------ reader thread
    def _read(self, requests) -> None:
        try:
            for request in requests:
                while not self._slots.acquire(timeout=POLL_S):
                    if self._closed.is_set():
                        return
                self._propose(request)
        except Exception:  # the client went away or broke the stream: what is in flight still gets answered
            pass
        finally:
            self._answers.put(_END)

    def _propose(self, request: pb.ProduceRequest) -> None:
        with self._lock:
            self._unanswered += 1
        try:
            future = self._submit(request)
        except Exception as exc:
            self._slots.release()
            self._answers.put(error_response(request, self._typed(exc)))
            return
        key = id(request)
        with self._lock:
            self._pending[key] = (time.monotonic() + self._timeout_s, request)
        future.add_done_callback(lambda f: self._done(key, f))

    def _done(self, key: int, future: Future) -> None:
        with self._lock:
            entry = self._pending.pop(key, None)
        if entry is None:
            return  # already answered as timed out
        request = entry[1]
        try:
            result = future.result()
        except Exception as exc:
            result = self._typed(exc)
        if isinstance(result, errors.RaftbusError):
            answer = error_response(request, result)
        else:
            answer = result_response(request, result)
        self._slots.release()
        self._answers.put(answer)

    # ------------------------------------------------------------------ timeouts
    def _expired(self):
        now = time.monotonic()
        with self._lock:
            late = [(key, request) for key, (deadline, request) in self._pending.items() if deadline <= now]
            for key, _ in late:
                del self._pending[key]
        for _, request in late:
            self._slots.release()
            yield error_response(request, errors.RequestTimedOut(
                f"not committed within {self._timeout_s:.1f} s; retry idempotently"))
