"""The producer's network side: one bidi ProduceStream per broker, carrying every batch sent to partitions that
broker leads.

The broker proposes a stream's requests in arrival order and answers each as its batch commits, so the producer
can keep several batches per partition in flight without reordering them (and pays one HTTP/2 message per
batch instead of a unary call). A response is matched to its request by `request_id`. A stream that fails
(broker gone, connection reset) fails every request it still holds with the typed error, which the producer
retries through the router; a request unanswered after `request_timeout_ms` fails with REQUEST_TIMED_OUT and
its stream is closed (a broker that hangs must not hold batches forever).
"""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

import grpc

from raftbus.client.errors import RaftbusError, RequestTimedOut, Unavailable, error_from_proto, error_from_rpc
from raftbus.client.router import Connection, Router
from raftbus.client.wire import raftbus_pb2 as pb

ProduceDone = Callable[["pb.ProduceResponse | None", "RaftbusError | None"], None]
SWEEP_INTERVAL_S = 0.1
_CLOSE = None


def response_error(response: pb.ProduceResponse) -> RaftbusError | None:
    if not response.HasField("error"):
        return None
    return error_from_proto(response.error)


class _Stream:
    """One open ProduceStream call to one broker and the requests it has not answered yet."""

    def __init__(self, conn: Connection, on_closed: Callable[["_Stream"], None]):
        self.address = conn.address
        self._on_closed = on_closed
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[float, ProduceDone]] = {}
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.closed = False
        self._call = conn.log.ProduceStream(self._requests())
        threading.Thread(target=self._read, name=f"raftbus-produce-{self.address}", daemon=True).start()

    def send(self, request: pb.ProduceRequest, done: ProduceDone, deadline_s: float) -> None:
        with self._lock:
            if self.closed:
                raise Unavailable(f"produce stream to {self.address} is closed")
            self._pending[request.request_id] = (deadline_s, done)
        self._outbox.put(request)

    def close(self, err: RaftbusError | None = None) -> None:
        """Stop sending; with `err`, also cancel the call and fail what is unanswered."""
        with self._lock:
            if self.closed and err is None:
                return
            self.closed = True
        self._outbox.put(_CLOSE)
        if err is not None:
            self._call.cancel()
            self._fail_all(err)

    def expire(self, now_s: float) -> bool:
        """Fail requests past their deadline; True when any did (the stream is then closed)."""
        with self._lock:
            late = [rid for rid, (deadline, _) in self._pending.items() if deadline <= now_s]
        if not late:
            return False
        self.close(RequestTimedOut(f"no answer from {self.address} within the request timeout"))
        return True

    def _requests(self):
        while (request := self._outbox.get()) is not _CLOSE:
            yield request

    def _read(self) -> None:
        err: RaftbusError = Unavailable(f"produce stream to {self.address} ended")
        try:
            for response in self._call:
                with self._lock:
                    entry = self._pending.pop(response.request_id, None)
                if entry is not None:
                    error = response_error(response)
                    entry[1](None if error else response, error)
        except grpc.RpcError as exc:
            err = error_from_rpc(exc)
        except Exception as exc:  # a broken channel must not kill the producer
            err = Unavailable(f"produce stream to {self.address} failed: {exc!r}")
        with self._lock:
            self.closed = True
        self._fail_all(err)
        self._on_closed(self)

    def _fail_all(self, err: RaftbusError) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for _, done in pending.values():
            done(None, err)


class StreamProduceTransport:
    """The Producer's transport over pooled produce streams (see the module docstring)."""

    def __init__(self, router: Router):
        self.router = router
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._closing = threading.Event()
        threading.Thread(target=self._sweep, name="raftbus-produce-sweeper", daemon=True).start()

    def partitions_for(self, topic: str) -> int:
        return self.router.partitions_for(topic)

    def send(self, request: pb.ProduceRequest, done: ProduceDone) -> None:
        try:
            address = self.router.leader_address(request.topic, request.partition)
            self._stream(address).send(request, done, time.monotonic() + self.router.request_timeout_s)
        except grpc.RpcError as exc:
            done(None, error_from_rpc(exc))
        except RaftbusError as err:
            done(None, err)

    def _stream(self, address: str) -> _Stream:
        with self._lock:
            stream = self._streams.get(address)
            if stream is None or stream.closed:
                if self._closing.is_set():
                    raise Unavailable("producer transport is closed")
                stream = self._streams[address] = _Stream(self.router.connection(address), self._forget)
            return stream

    def _forget(self, stream: _Stream) -> None:
        with self._lock:
            if self._streams.get(stream.address) is stream:
                del self._streams[stream.address]

    def _sweep(self) -> None:
        while not self._closing.wait(SWEEP_INTERVAL_S):
            with self._lock:
                streams = list(self._streams.values())
            now = time.monotonic()
            for stream in streams:
                if stream.expire(now):
                    self._forget(stream)

    def retry_delay_s(self, err: RaftbusError, attempt: int, topic: str, partition: int) -> float | None:
        return self.router.produce_retry_delay_s(err, attempt, topic=topic, partition=partition)

    def close(self) -> None:
        self._closing.set()
        with self._lock:
            streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream.close()
        self.router.close()
