"""Queues: queue-topic calls besides produce and consume — lease once, settle, get, delete, change_priority,
stats, peek and redrive.

Every call goes to the leader of the partition it concerns through the router (a message id carries its
partition), following NOT_LEADER hints and retrying retriable errors. Batch calls answer per message: a list
with None for done or the typed error of that message.
"""
from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import Future

from raftbus.client import settings
from raftbus.client.errors import RaftbusError, WrongTopicKind, error_from_code
from raftbus.client.queues.ids import partition_of
from raftbus.client.queues.messages import Message, PartitionQueueStats, QueueStats, leased_messages
from raftbus.client.queues.producer import QueueStubs
from raftbus.client.queues.codec import pack_leases
from raftbus.client.credentials import TlsSource
from raftbus.client.router import Router
from raftbus.client.wire import queues_pb2 as qpb


def item_errors(response: qpb.QueueBatchResponse) -> list[RaftbusError | None]:
    """Per message: None when done, else its typed error."""
    return [error_from_code(r.error.code, r.error.message) if r.HasField("error") and r.error.code else None
            for r in response.results]


def packed_errors(response: qpb.QueueBatchResponse, count: int) -> list[RaftbusError | None]:
    """item_errors of a request with `count` packed items: the answer lists only the refused ones."""
    errors: list[RaftbusError | None] = [None] * count
    for failure in response.failures:
        if failure.index < count:
            errors[failure.index] = error_from_code(failure.error.code, failure.error.message)
    return errors


def by_partition(ids: Iterable[int]) -> dict[int, list[int]]:
    grouped: dict[int, list[int]] = {}
    for mid in ids:
        grouped.setdefault(partition_of(mid), []).append(mid)
    return grouped


class Queues:
    """Queue-topic operations; a context manager that closes its channels."""

    def __init__(self, bootstrap: str | list[str] | None = None, *,
                 request_timeout_ms: int = settings.REQUEST_TIMEOUT_MS,
                 connect_timeout_ms: int = settings.CONNECT_TIMEOUT_MS, router: Router | None = None,
                 tls_ca: TlsSource = None, tls_cert: TlsSource = None, tls_key: TlsSource = None,
                 token: str | None = None):
        self.router = router or Router(bootstrap, request_timeout_ms=request_timeout_ms,
                                       connect_timeout_ms=connect_timeout_ms,
                                       tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token)
        self._owns_router = router is None
        self.stubs = QueueStubs(self.router)
        self.timeout_s = request_timeout_ms / 1000
        self.settler_id = os.urandom(16)
        self._sequence = itertools.count(1)

    def _call(self, topic: str, partition: int, method: str, request):
        return self.router.call_partition(
            topic, partition, lambda conn: getattr(self.stubs(conn), method)(request, timeout=self.timeout_s))

    # ------------------------------------------------------------------ leases
    def lease(self, topic: str, partition: int, max_messages: int = 10, visibility_ms: int = 0,
              max_wait_ms: int = 0) -> list[Message]:
        """Lease up to max_messages of one partition, waiting up to max_wait_ms for one to be due."""
        request = qpb.LeaseRequest(topic=topic, partition=partition, max_messages=max_messages,
                                   visibility_ms=visibility_ms, max_wait_ms=max_wait_ms, packed=True)
        return leased_messages(topic, partition, self._call(topic, partition, "Lease", request), self)

    def ack_many(self, messages: list[Message]) -> list[RaftbusError | None]:
        return self._settle(messages, "Ack", lambda topic, p, chosen: qpb.AckRequest(
            topic=topic, partition=p, packed_leases=pack_leases((m.message_id, m.delivery_count) for m in chosen)))

    def nack_many(self, messages: list[Message], delay_ms: int | None = None,
                  reason: str = "") -> list[RaftbusError | None]:
        def request(topic, p, chosen):
            items = [qpb.NackItem(message_id=m.message_id, delivery_count=m.delivery_count, reason=reason,
                                  **({} if delay_ms is None else {"delay_ms": delay_ms})) for m in chosen]
            return qpb.NackRequest(topic=topic, partition=p, nacks=items)

        return self._settle(messages, "Nack", request)

    def _settle(self, messages: list[Message], method: str, build) -> list[RaftbusError | None]:
        answers: dict[int, RaftbusError | None] = {}
        groups: dict[tuple[str, int], list[Message]] = {}
        for m in messages:
            groups.setdefault((m.topic, m.partition), []).append(m)
        for (topic, partition), chosen in groups.items():
            request = build(topic, partition, chosen)
            request.settler_id, request.sequence = self.settler_id, next(self._sequence)
            response = self._call(topic, partition, method, request)
            errors = packed_errors(response, len(chosen)) if method == "Ack" else item_errors(response)
            for m, error in zip(chosen, errors):
                answers[id(m)] = error
        return [answers[id(m)] for m in messages]

    # Settler: Message.ack()/nack()/extend() of messages leased through this client.
    def ack(self, message: Message) -> Future:
        return _settled(lambda: self.ack_many([message])[0])

    def nack(self, message: Message, delay_ms: int | None = None, reason: str = "") -> Future:
        return _settled(lambda: self.nack_many([message], delay_ms, reason)[0])

    def extend(self, message: Message, visibility_ms: int) -> Future:
        def call():
            request = qpb.ExtendRequest(topic=message.topic, partition=message.partition, extensions=[
                qpb.ExtendItem(message_id=message.message_id, delivery_count=message.delivery_count,
                               visibility_ms=visibility_ms)])
            response = self._call(message.topic, message.partition, "Extend", request)
            error = item_errors(response)[0]
            if error is None:
                message.lease_deadline_ms = response.results[0].lease_deadline_ms
                return message.lease_deadline_ms
            return error

        return _settled(call)

    # ------------------------------------------------------------------ per-message operations
    def get(self, topic: str, message_id: int) -> Message:
        """The message in any state; UnknownMessage once it is acked, deleted or dead-lettered."""
        request = qpb.GetMessageRequest(topic=topic, message_id=message_id)
        return Message.from_proto(topic, self._call(topic, partition_of(message_id), "Get", request))

    def delete(self, topic: str, message_ids: list[int]) -> list[RaftbusError | None]:
        """Delete (cancel) messages in any state; per id None or its error (UnknownMessage)."""
        answers: dict[int, RaftbusError | None] = {}
        for partition, ids in by_partition(message_ids).items():
            request = qpb.DeleteMessagesRequest(topic=topic, partition=partition, message_ids=ids)
            response = self._call(topic, partition, "Delete", request)
            for mid, error in zip(ids, item_errors(response)):
                answers.setdefault(mid, error)
        return [answers[mid] for mid in message_ids]

    def change_priority(self, topic: str, message_id: int, priority: int | None = None,
                        deliver_at_ms: int | None = None) -> Message:
        """New priority and/or delivery time; MessageNotWaiting when rescheduling a leased message."""
        fields = {k: v for k, v in (("priority", priority), ("deliver_at_ms", deliver_at_ms)) if v is not None}
        request = qpb.ChangePriorityRequest(topic=topic, message_id=message_id, **fields)
        return Message.from_proto(topic, self._call(topic, partition_of(message_id), "ChangePriority", request))

    def peek(self, topic: str, partition: int | None = None, state: str = "ready",
             max_messages: int = 10) -> list[Message]:
        """Messages in `state` without leasing them, per partition in index order (ready: delivery order)."""
        partitions = range(self.router.partitions_for(topic)) if partition is None else [partition]
        found = []
        for p in partitions:
            request = qpb.PeekRequest(topic=topic, partition=p, state=state, max_messages=max_messages)
            found += [Message.from_proto(topic, m) for m in self._call(topic, p, "Peek", request).messages]
        return found

    def scan(self, topic: str, partition: int, after_message_id: int = 0, max_messages: int = 500) -> list[Message]:
        """One page of a partition's messages of every state, in id order, after `after_message_id`."""
        request = qpb.ScanRequest(topic=topic, partition=partition, after_message_id=after_message_id,
                                  max_messages=max_messages)
        return [Message.from_proto(topic, m) for m in self._call(topic, partition, "Scan", request).messages]

    def iter_messages(self, topic: str, partition: int, page_messages: int = 500) -> Iterator[Message]:
        """Every message of a partition (ready, delayed, in flight, dead) in id order, read in pages."""
        after = 0
        while True:
            page = self.scan(topic, partition, after, page_messages)
            yield from page
            if len(page) < page_messages:
                return
            after = page[-1].message_id

    # ------------------------------------------------------------------ stats and dead letters
    def partition_stats(self, topic: str) -> list[PartitionQueueStats]:
        return [PartitionQueueStats.from_proto(self._call(topic, p, "Stats",
                                                          qpb.QueueStatsRequest(topic=topic, partition=p)))
                for p in range(self.router.partitions_for(topic))]

    def stats(self, topic: str) -> QueueStats:
        """Ready, delayed, in flight and dead per topic, partition and group, plus its dead-letter topic's total."""
        partitions = self.partition_stats(topic)
        dlq = f"{topic}.dlq"
        dead_lettered = 0
        if dlq in self.router.refresh().kinds:
            dead_lettered = sum(p.ready + p.delayed + p.in_flight for p in self.partition_stats(dlq))
        return QueueStats.combine(topic, partitions, dead_lettered)

    def redrive(self, topic: str, max_messages: int | None = None) -> int:
        """Move ready messages of `<topic>.dlq` back into `topic` (all of them, or up to max_messages)."""
        kind = self.router.topic_kind(topic)  # UnknownTopic names `topic` itself, not its dead-letter topic
        if kind != "queue":
            raise WrongTopicKind(f"topic {topic!r} is a {kind} topic, not a queue topic")
        moved = 0
        for p in range(self.router.partitions_for(f"{topic}.dlq")):
            while max_messages is None or moved < max_messages:
                batch = settings.QUEUE_REDRIVE_BATCH_MESSAGES
                if max_messages is not None:
                    batch = min(batch, max_messages - moved)
                request = qpb.RedriveRequest(topic=topic, partition=p, max_messages=batch)
                done = self.router.call_partition(
                    f"{topic}.dlq", p, lambda conn: self.stubs(conn).Redrive(request, timeout=self.timeout_s)).moved
                moved += done
                if done < batch:
                    break
        return moved

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if self._owns_router:
            self.router.close()

    def __enter__(self) -> "Queues":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _settled(call) -> Future:
    """Run a settlement now; the future carries its value, or its per-message error as an exception."""
    future: Future = Future()
    future.set_running_or_notify_cancel()
    try:
        answer = call()
    except RaftbusError as err:
        future.set_exception(err)
        return future
    if isinstance(answer, RaftbusError):
        future.set_exception(answer)
    else:
        future.set_result(answer)
    return future
