"""The QueueConsumer: leases messages of queue topics and settles them, batched per partition.

One LeaseStream per partition (a server stream on the partition leader) delivers messages as they become
due; the broker keeps at most `prefetch` of this consumer's leases per partition unsettled, so a slow consumer
does not hold leases it cannot work on. A stream that fails (leader moved, broker down) is reopened on the
new leader once this consumer holds fewer than `prefetch` leases of the partition; leases already handed out stay
valid there, since leases are replicated. ack(), nack() and extend() of a message are collected every `ack_linger_ms` (or
sooner when QUEUE_BATCH_MESSAGES_MAX are pending) and each partition's go as one request, partitions side by side
(a partition without a leader delays its own settlements only). A lease keeper thread renews the leases held, prefetched or handed out,
with one Extend per partition before they run out, and poll hands out no message whose lease is about to end
(client/queues/leases.py).
"""
from __future__ import annotations

import collections
import itertools
import os
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import grpc

from raftbus.client import settings
from raftbus.client.errors import (
    InvalidArgument,
    RaftbusError,
    RequestTimedOut,
    Unavailable,
    WrongTopicKind,
    error_from_proto,
    error_from_rpc,
)
from raftbus.client.queues.leases import (
    ENDING_REASON,
    KeptSettler,
    LeaseCounts,
    LeaseKeeper,
    LeasePolicy,
    keep_leases_round,
)
from raftbus.client.queues.messages import Message, leased_messages
from raftbus.client.queues.producer import QueueStubs
from raftbus.client.queues.codec import pack_leases
from raftbus.client.queues.admin import item_errors, packed_errors
from raftbus.client.credentials import TlsSource
from raftbus.client.router import Router, exponential_backoff_s
from raftbus.client.wire import queues_pb2 as qpb

_ACK, _NACK, _EXTEND = "Ack", "Nack", "Extend"


class _Settlements:
    """Pending acks, nacks and extends, sent per (kind, topic, partition) as one request.

    One thread collects what is pending every linger and hands each partition's requests to that partition's lane.
    A lane sends its requests one after the other (the broker recognises a retry of a settler's last batch only);
    lanes run side by side on a pool of QUEUE_SETTLE_PARTITIONS_AT_ONCE threads, so a partition whose leader is
    gone holds up its own settlements only, never the acks and lease renewals of the others."""

    def __init__(self, router: Router, stubs: QueueStubs, linger_s: float, timeout_s: float):
        self.router, self.stubs = router, stubs
        self.settler_id = os.urandom(16)
        self._sequences: dict[tuple[str, int], itertools.count] = {}
        self.linger_s, self.timeout_s = linger_s, timeout_s
        self._cond = threading.Condition()
        self._pending: list[tuple[str, Message, object, Future]] = []
        self._lanes: dict[tuple[str, int], collections.deque] = {}  # a partition's requests waiting to be sent
        self._busy: set[tuple[str, int]] = set()  # partitions whose lane is being sent by a pool thread
        self._in_progress = 0  # entries taken from pending and not yet answered
        self._stopping = False
        self._pool = ThreadPoolExecutor(settings.QUEUE_SETTLE_PARTITIONS_AT_ONCE,
                                        thread_name_prefix="raftbus-queue-settle-lane")
        self._thread = threading.Thread(target=self._run, name="raftbus-queue-settle", daemon=True)
        self._thread.start()

    # Settler
    def ack(self, message: Message) -> Future:
        return self._add(_ACK, message, None)

    def nack(self, message: Message, delay_ms: int | None, reason: str) -> Future:
        return self._add(_NACK, message, (delay_ms, reason))

    def extend(self, message: Message, visibility_ms: int) -> Future:
        return self._add(_EXTEND, message, visibility_ms)

    def extend_many(self, messages: list[Message], visibility_ms: int) -> list[Future]:
        """Extends of one partition's leases, pending together so they go as one request."""
        return self._add_many(_EXTEND, messages, visibility_ms)

    def _add(self, kind: str, message: Message, argument) -> Future:
        return self._add_many(kind, [message], argument)[0]

    def _add_many(self, kind: str, messages: list[Message], argument) -> list[Future]:
        futures = []
        with self._cond:
            if self._stopping:
                raise Unavailable("consumer is closed")
            for message in messages:
                future: Future = Future()
                future.set_running_or_notify_cancel()
                self._pending.append((kind, message, argument, future))
                futures.append(future)
            if len(self._pending) == len(messages) or len(self._pending) >= settings.QUEUE_BATCH_MESSAGES_MAX:
                self._cond.notify_all()
        return futures

    def flush(self, timeout_s: float | None) -> bool:
        with self._cond:
            self._cond.notify_all()
            return self._cond.wait_for(lambda: not self._pending and not self._in_progress, timeout_s)

    def close(self, timeout_s: float | None) -> None:
        self.flush(timeout_s)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(5)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._stopping)
                if self._stopping and not self._pending:
                    return
                linger_ends = time.monotonic() + self.linger_s  # lanes finishing notify too: wait the time out
                while len(self._pending) < settings.QUEUE_BATCH_MESSAGES_MAX and not self._stopping:
                    left_s = linger_ends - time.monotonic()
                    if left_s <= 0:
                        break
                    self._cond.wait(left_s)
                batch, self._pending = self._pending, []
                self._in_progress += len(batch)
                groups: dict[tuple[str, str, int], list] = {}
                for entry in batch:
                    groups.setdefault((entry[0], entry[1].topic, entry[1].partition), []).append(entry)
                step = settings.QUEUE_BATCH_MESSAGES_MAX
                for (kind, topic, partition), entries in groups.items():
                    lane = self._lanes.setdefault((topic, partition), collections.deque())
                    lane.extend((kind, entries[start:start + step]) for start in range(0, len(entries), step))
                idle = {(topic, partition) for _, topic, partition in groups} - self._busy  # others: busy or empty
                self._busy.update(idle)
            for tp in idle:
                self._pool.submit(self._drain, tp)

    def _drain(self, tp: tuple[str, int]) -> None:
        """Send a partition's waiting requests in order until its lane is empty."""
        while True:
            with self._cond:
                lane = self._lanes.get(tp)
                if not lane:
                    self._busy.discard(tp)
                    self._lanes.pop(tp, None)
                    return
                kind, entries = lane.popleft()
            try:
                self._send(kind, *tp, entries)
            finally:
                with self._cond:
                    self._in_progress -= len(entries)
                    self._cond.notify_all()

    def _send(self, kind: str, topic: str, partition: int, entries: list) -> None:
        request = settlement_request(kind, topic, partition, entries)
        if kind != _EXTEND:  # acks and nacks carry a batch number, so a retry is answered as the first attempt
            request.settler_id = self.settler_id
            request.sequence = next(self._sequences.setdefault((topic, partition), itertools.count(1)))
        try:
            response = self.router.call_partition(
                topic, partition, lambda conn: getattr(self.stubs(conn), kind)(request, timeout=self.timeout_s))
        except RaftbusError as err:
            for *_, future in entries:
                future.set_exception(err)
            return
        except Exception as exc:  # noqa: BLE001 - a lane thread must settle its futures whatever happened
            for *_, future in entries:
                future.set_exception(Unavailable(f"{kind} failed: {exc!r}"))
            return
        settle_entries(kind, entries, response)


def settle_entries(kind: str, entries: list, response: qpb.QueueBatchResponse) -> None:
    """Settle each entry's future (concurrent or asyncio) from the broker's answer to their one request."""
    if kind == _ACK:
        for (*_, future), error in zip(entries, packed_errors(response, len(entries))):
            future.set_result(None) if error is None else future.set_exception(error)
        return
    for (kind_, message, _, future), error, result in zip(entries, item_errors(response), response.results):
        if error is not None:
            future.set_exception(error)
        elif kind_ == _EXTEND:
            message.lease_deadline_ms = result.lease_deadline_ms
            future.set_result(result.lease_deadline_ms)
        else:
            future.set_result(None)


def settlement_request(kind: str, topic: str, partition: int, entries: list):
    if kind == _ACK:
        return qpb.AckRequest(topic=topic, partition=partition, packed_leases=pack_leases(
            (m.message_id, m.delivery_count) for _, m, _, _ in entries))
    if kind == _NACK:
        return qpb.NackRequest(topic=topic, partition=partition, nacks=[
            qpb.NackItem(message_id=m.message_id, delivery_count=m.delivery_count, reason=reason,
                         **({} if delay_ms is None else {"delay_ms": delay_ms}))
            for _, m, (delay_ms, reason), _ in entries])
    return qpb.ExtendRequest(topic=topic, partition=partition, extensions=[
        qpb.ExtendItem(message_id=m.message_id, delivery_count=m.delivery_count, visibility_ms=visibility_ms)
        for _, m, visibility_ms, _ in entries])


def now_ms() -> int:
    """The consumer's clock for lease deadlines: monotonic, in ms."""
    return time.monotonic_ns() // 1_000_000


def check_consumer_options(topics: list[str], prefetch: int, lease_batch_messages: int,
                           partitions_check_ms: int) -> None:
    """InvalidArgument for options no queue consumer (sync or asyncio) can run with."""
    if not topics or lease_batch_messages < 1 or partitions_check_ms < 1:
        raise InvalidArgument("a queue consumer needs topics, lease_batch_messages >= 1 and partitions_check_ms >= 1")
    if not 1 <= prefetch <= settings.QUEUE_PREFETCH_MESSAGES_MAX:
        raise InvalidArgument(f"prefetch must be between 1 and {settings.QUEUE_PREFETCH_MESSAGES_MAX} "
                              "(QUEUE_PREFETCH_MESSAGES_MAX: one Extend request renews what a partition holds)")


class QueueConsumer:
    """Consumes queue topics: `poll` (or iterate) for leased messages, then ack/nack/extend each one.

    One lease stream per partition, to its leader. Without `partitions` the consumer follows whole topics: every
    `partitions_check_ms` it reads fresh metadata and opens streams for partitions added since.

    The leases it holds are kept alive until they are settled, up to `lease_extension_max_ms` after each message
    arrived (0: never extended): renewed with one Extend per partition when one has less than
    `lease_extension_margin_ms` left; `poll` gives back (nack, no delay) a message with less than
    `lease_handoff_margin_ms` left instead of handing it out. `lease_counts()` says what the keeping did.
    """

    def __init__(self, bootstrap: str | list[str] | None = None, *, topics: list[str] | str,
                 partitions: list[int] | None = None, visibility_ms: int = settings.QUEUE_VISIBILITY_MS,
                 prefetch: int = settings.QUEUE_PREFETCH_MESSAGES,
                 lease_batch_messages: int = settings.QUEUE_LEASE_BATCH_MESSAGES,
                 ack_linger_ms: int = settings.QUEUE_ACK_LINGER_MS,
                 partitions_check_ms: int = settings.QUEUE_PARTITIONS_CHECK_MS,
                 lease_extension_max_ms: int = settings.QUEUE_LEASE_EXTENSION_MAX_MS,
                 lease_extension_margin_ms: int | None = None, lease_handoff_margin_ms: int | None = None,
                 request_timeout_ms: int = settings.REQUEST_TIMEOUT_MS, router: Router | None = None,
                 tls_ca: TlsSource = None, tls_cert: TlsSource = None, tls_key: TlsSource = None,
                 token: str | None = None):
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        check_consumer_options(self.topics, prefetch, lease_batch_messages, partitions_check_ms)
        policy = LeasePolicy.of(visibility_ms, lease_extension_max_ms, lease_extension_margin_ms,
                                lease_handoff_margin_ms)
        self.router = router or Router(bootstrap, request_timeout_ms=request_timeout_ms,
                                       tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token)
        self._owns_router = router is None
        self.stubs = QueueStubs(self.router)
        self.visibility_ms = visibility_ms
        self.prefetch = prefetch
        self.lease_batch_messages = min(lease_batch_messages, prefetch)
        self.settlements = _Settlements(self.router, self.stubs, ack_linger_ms / 1000, request_timeout_ms / 1000)
        self._room = threading.Condition()  # notified when held leases are released: a stream may reopen
        self.leases = LeaseKeeper(policy, on_released=self._released)
        self._settler = KeptSettler(self.settlements, self.leases, now_ms)
        self._buffer: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._failure: RaftbusError | None = None
        self._calls: dict[tuple[str, int], object] = {}
        self._lock = threading.Lock()
        self._threads = []
        self._streaming: set[tuple[str, int]] = set()
        for topic in self.topics:
            if self.router.topic_kind(topic) != "queue":
                self.settlements.close(0)
                raise WrongTopicKind(f"{topic!r} is a stream topic; read it with Reader (or a Consumer)")
        for topic in self.topics:
            for partition in partitions if partitions is not None else range(self.router.partitions_for(topic)):
                self._start_stream(topic, partition)
        keeper = threading.Thread(target=self._keep_leases, daemon=True, name="raftbus-queue-leases")
        keeper.start()
        self._threads.append(keeper)
        if partitions is None:  # whole topics: partitions added later are leased from too
            watcher = threading.Thread(target=self._watch_partitions, args=(partitions_check_ms / 1000,),
                                       daemon=True, name="raftbus-lease-partitions")
            watcher.start()
            self._threads.append(watcher)

    # ------------------------------------------------------------------ public API
    def poll(self, timeout_s: float = 1.0, max_messages: int = settings.QUEUE_POLL_MESSAGES_MAX) -> list[Message]:
        """Up to max_messages leased messages, waiting up to timeout_s for the first one. A message whose lease
        ends within the hand-off margin is given back instead (nack, no delay), one whose lease ended dropped, one
        whose renewal is still unanswered kept in the buffer for a later poll."""
        if self._failure is not None:
            raise self._failure
        messages: list[Message] = []
        waiting: list[Message] = []  # their extends are unanswered: buffered again after this poll
        give_up_at = time.monotonic() + timeout_s
        try:
            while len(messages) < max_messages:
                try:
                    message = self._buffer.get_nowait() if messages else \
                        self._buffer.get(timeout=max(give_up_at - time.monotonic(), 0))
                except queue.Empty:
                    break
                self.leases.hand_over(message, now_ms(), messages, waiting, self._give_back)
        finally:
            for message in waiting:
                self._buffer.put(message)
        return messages

    def lease_counts(self) -> LeaseCounts:
        """What keeping this consumer's leases did so far: extends sent, leases renewed, messages dropped."""
        return self.leases.counts()

    def __iter__(self) -> Iterator[Message]:
        while not self._stopping.is_set():
            yield from self.poll()

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every ack, nack and extend made so far has its answer."""
        if not self.settlements.flush(timeout_s):
            raise RequestTimedOut(f"settlements not answered within {timeout_s} s")

    def close(self, timeout_s: float | None = 10.0) -> None:
        """Send pending settlements, stop the streams (unsettled leases expire on the broker)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        with self._room:
            self._room.notify_all()
        self.settlements.close(timeout_s)
        with self._lock:
            calls = list(self._calls.values())
        for call in calls:
            call.cancel()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(5)
        if self._owns_router:
            self.router.close()

    def __enter__(self) -> "QueueConsumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ keeping leases
    def _keep_leases(self) -> None:
        """Each round: renew what is due (one Extend per partition), then sleep until the next lease is due."""
        while not self._stopping.is_set():
            wait_s = keep_leases_round(self.settlements, self.leases, now_ms)
            if wait_s is None:
                return  # closed
            self._stopping.wait(wait_s)

    def _give_back(self, message: Message) -> None:
        """Nack, without a delay, a message this consumer will not hand out (its answer is not needed)."""
        try:
            self.settlements.nack(message, 0, ENDING_REASON)
        except Unavailable:
            pass  # closed: the lease runs out on its own

    def _released(self) -> None:
        with self._room:
            self._room.notify_all()

    def _wait_for_room(self, topic: str, partition: int) -> None:
        """Before a partition's stream (re)opens: until this consumer holds fewer than `prefetch` of its leases
        (the new stream's window does not count those it already holds, so at most twice prefetch are held)."""
        with self._room:
            self._room.wait_for(lambda: self._stopping.is_set() or
                                self.leases.held(topic, partition) < self.prefetch)

    # ------------------------------------------------------------------ stream threads
    def _start_stream(self, topic: str, partition: int) -> None:
        with self._lock:
            if (topic, partition) in self._streaming or self._stopping.is_set():
                return
            self._streaming.add((topic, partition))
            thread = threading.Thread(target=self._stream, args=(topic, partition), daemon=True,
                                      name=f"raftbus-lease-{topic}-{partition}")
            self._threads.append(thread)
        thread.start()

    def _watch_partitions(self, interval_s: float) -> None:
        """Every interval, fresh metadata: a lease stream for each partition added to a topic since."""
        while not self._stopping.wait(interval_s):
            try:
                topics = self.router.refresh().topics
            except RaftbusError:
                continue  # no broker answered: the next round asks again
            for topic in self.topics:
                for partition in sorted(topics.get(topic, {})):
                    self._start_stream(topic, partition)

    def _stream(self, topic: str, partition: int) -> None:
        failures = 0
        request = qpb.LeaseRequest(topic=topic, partition=partition, max_messages=self.lease_batch_messages,
                                   visibility_ms=self.visibility_ms, max_in_flight=self.prefetch, packed=True)
        while not self._stopping.is_set():
            self._wait_for_room(topic, partition)
            try:
                if self._stopping.is_set():
                    return
                call = self.stubs.for_partition(topic, partition).LeaseStream(request)
                with self._lock:
                    self._calls[(topic, partition)] = call
                if self._stopping.is_set():
                    call.cancel()
                for response in call:
                    if response.HasField("error") and response.error.code:
                        raise error_from_proto(response.error)
                    failures = 0
                    messages = leased_messages(topic, partition, response, self._settler)
                    self.leases.received(messages, now_ms())
                    for message in messages:
                        self._buffer.put(message)
                err: RaftbusError = Unavailable("lease stream ended")
            except grpc.RpcError as exc:
                err = error_from_rpc(exc)
            except RaftbusError as exc:
                err = exc
            if self._stopping.is_set():
                return
            failures += 1
            if not err.retriable:
                self._failure = err
                return
            hinted = self.router.note_failure(err, 1, topic=topic, partition=partition) == 0.0
            if hinted and failures <= 2:
                continue  # a NOT_LEADER hint: reopen on the named leader at once
            self._stopping.wait(exponential_backoff_s(failures, settings.QUEUE_STREAM_RETRY_BACKOFF_MS / 1000,
                                                      settings.QUEUE_STREAM_RETRY_BACKOFF_MAX_MS / 1000))

