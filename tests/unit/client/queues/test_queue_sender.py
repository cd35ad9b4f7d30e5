"""The queue sender of the sync Producer: per-partition Enqueue batches, message futures settled per batch."""
from __future__ import annotations

import concurrent.futures
import threading

import pytest

from raftbus.client.errors import InvalidArgument, LeaderNotAvailable, UnknownTopic
from raftbus.client.queues.messages import MessageMetadata
from raftbus.client.queues.producer import QueueSender
from raftbus.client.wire import queues_pb2 as qpb


class _Call:
    def __init__(self, response):
        self._response = response

    def add_done_callback(self, fn):
        fn(self)

    def result(self):
        return self._response


class _Stub:
    """Answers each Enqueue from `answers` (a response builder or an error), recording every request."""

    def __init__(self, answers):
        self.requests: list[qpb.EnqueueRequest] = []
        self._answers = answers
        self.Enqueue = self

    def future(self, request, timeout=None):
        copy = qpb.EnqueueRequest()
        copy.CopyFrom(request)
        self.requests.append(copy)
        answer = self._answers.pop(0) if self._answers else _ok
        if isinstance(answer, BaseException):
            raise answer  # a typed error as the router raises it (no leader known, unknown topic)
        return _Call(answer(request))


def _ok(request):
    first = 100 * (request.partition + 1) + request.base_sequence
    return qpb.EnqueueResponse(request_id=request.request_id, enqueued_ms=1_234, results=[
        qpb.EnqueueResult(message_id=first + i, duplicate=m.idempotency_key == "dup")
        for i, m in enumerate(request.messages)])


class _Router:
    request_timeout_s = 5.0
    retry_backoff_s = 0.001
    retry_backoff_max_s = 0.002

    def __init__(self):
        self.failures = 0

    def produce_retry_delay_s(self, err, attempt, topic=None, partition=None):
        self.failures += 1
        return None if isinstance(err, UnknownTopic) else 0.001


class _Stubs:
    def __init__(self, stub):
        self.stub = stub

    def for_partition(self, topic, partition):
        return self.stub


def sender_with(answers=(), linger_ms=60_000):
    stub = _Stub(list(answers))
    sender = QueueSender(_Router(), b"p" * 16, linger_ms=linger_ms, batch_bytes_max=1 << 20,
                         buffer_bytes_max=1 << 24, delivery_timeout_ms=10_000, max_block_ms=1_000)
    sender.stubs = _Stubs(stub)
    return sender, stub


def message(i: int, key: str = ""):
    return (b"record-%d" % i, i % 10, "g" if i % 2 else "", 0, key)


def test_messages_of_a_partition_go_out_in_one_request_and_settle_in_order():
    sender, stub = sender_with()
    try:
        futures = [sender.send("q", i % 2, 2, message(i, "dup" if i == 3 else "")) for i in range(6)]
        assert sender.flush(5.0)
        assert len(stub.requests) == 2  # one Enqueue per partition
        by_partition = {r.partition: r for r in stub.requests}
        assert [m.record for m in by_partition[1].messages] == [b"record-1", b"record-3", b"record-5"]
        assert [(m.priority, m.group) for m in by_partition[1].messages] == [(1, "g"), (3, "g"), (5, "g")]
        assert by_partition[0].base_sequence == 0 and by_partition[0].producer_id == b"p" * 16
        results = [f.result(timeout=1) for f in futures]
        assert results[3] == MessageMetadata("q", 1, 201, True, 1_234)
        assert [r.message_id for r in results] == [100, 200, 101, 201, 102, 202]
        assert not any(r.duplicate for i, r in enumerate(results) if i != 3)
        done, _ = concurrent.futures.wait(futures, timeout=1)
        assert len(done) == 6
        seen = []
        futures[0].add_done_callback(lambda f: seen.append(f.result().message_id))
        assert seen == [100]
    finally:
        sender.close(1.0)


def test_keyless_messages_move_to_the_next_partition_when_their_batch_leaves():
    """Goal: the sticky partition moves on when its batch goes out after its linger, not only when a batch fills,
    so keyless messages sent slower than they fill batches spread over every partition."""
    sender, stub = sender_with(linger_ms=0)
    try:
        futures = []
        for i in range(6):
            futures.append(sender.send("q", None, 3, message(i)))
            assert sender.flush(5.0)
        assert [r.partition for r in stub.requests] == [0, 1, 2, 0, 1, 2]
        assert [f.result(timeout=1).partition for f in futures] == [0, 1, 2, 0, 1, 2]
    finally:
        sender.close(1.0)


def test_a_retried_batch_keeps_its_messages_and_sequence_under_a_new_request_id():
    sender, stub = sender_with([LeaderNotAvailable("election"), _ok])
    try:
        futures = [sender.send("q", 0, 1, message(i)) for i in range(3)]
        assert sender.flush(5.0)
        assert len(stub.requests) == 2
        first, again = stub.requests
        assert list(first.messages) == list(again.messages) and first.base_sequence == again.base_sequence == 0
        assert first.request_id != again.request_id
        assert [f.result(timeout=1).message_id for f in futures] == [100, 101, 102]
        later = sender.send("q", 0, 1, message(9))
        assert sender.flush(5.0)
        assert stub.requests[-1].base_sequence == 3 and later.result(timeout=1).message_id == 103
    finally:
        sender.close(1.0)


def test_a_final_error_fails_every_message_of_the_batch():
    sender, stub = sender_with([UnknownTopic("gone")])
    try:
        futures = [sender.send("q", 0, 1, message(i)) for i in range(4)]
        sender.flush(5.0)
        for future in futures:
            with pytest.raises(UnknownTopic):
                future.result(timeout=1)
            assert isinstance(future.exception(timeout=1), UnknownTopic)
    finally:
        sender.close(1.0)


def test_the_sender_thread_is_woken_when_a_batch_opens_not_for_every_message():
    sender, stub = sender_with()
    wakes = []
    notify_all = sender._cond.notify_all
    sender._cond.notify_all = lambda: (wakes.append(threading.current_thread().name), notify_all())
    try:
        futures = [sender.send("q", 0, 1, message(i)) for i in range(50)]
        assert len(wakes) == 1  # the batch opened; 49 messages joined it without waking anyone
        assert sender.flush(5.0)
        assert len(stub.requests) == 1 and len(stub.requests[0].messages) == 50
        assert futures[-1].result(timeout=1).message_id == 149
    finally:
        sender._cond.notify_all = notify_all
        sender.close(1.0)


def test_producer_refuses_bad_queue_fields_before_queueing_anything():
    from raftbus.client.producer import check_queue_fields

    for fields in ((1.5, None, None, None), (2**31, None, None, None), (None, 3, None, None),
                   (None, None, -1, None), (None, None, None, b"key")):
        with pytest.raises(InvalidArgument):
            check_queue_fields(*fields)
    check_queue_fields(True, "g", 0, "k")  # a bool is an int, as before
