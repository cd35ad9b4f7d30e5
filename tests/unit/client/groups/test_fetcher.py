"""Goal: the consumer's fetcher keeps one fenced fetch in flight per partition, buffers answers undecoded, hands
out at most max_records in offset order, drops answers made stale by a seek, and decodes only on iteration."""
import threading

import grpc
import pytest

from raftbus.client.errors import NotLeader, status_for, trailing_metadata
from raftbus.client.groups.fetcher import ConsumerRecords, Fetcher
from raftbus.client.groups.calls import TopicPartition
from raftbus.client.records import encode_batch, encode_stored_batch
from raftbus.client.wire import raftbus_pb2 as pb

A, B = TopicPartition("t", 0), TopicPartition("t", 1)
MEMBER = ("g", "m-1", 7)


class FakeRpcError(grpc.RpcError):
    """How a failed gRPC future reports a typed error: a status plus the code in trailing metadata."""

    def __init__(self, error):
        self.error = error

    def code(self):
        return status_for(self.error)

    def details(self):
        return self.error.message

    def trailing_metadata(self):
        return trailing_metadata(self.error)


class FakeCall:
    def __init__(self, request):
        self.request = request
        self.callbacks = []
        self.outcome = None
        self.was_cancelled = False

    def add_done_callback(self, fn):
        self.callbacks.append(fn)

    def answer(self, response=None, error=None):
        self.outcome = (response, error)
        for fn in self.callbacks:
            fn(self)

    def result(self):
        response, error = self.outcome
        if error is not None:
            raise FakeRpcError(error)
        return response

    def cancel(self):
        self.was_cancelled = True

    def cancelled(self):
        return self.was_cancelled


class FakeRouter:
    request_timeout_s = 1.0

    def __init__(self):
        self.calls: list[FakeCall] = []
        router = self

        class Fetch:
            @staticmethod
            def future(request, timeout):
                call = FakeCall(request)
                router.calls.append(call)
                return call

        class Log:
            pass

        Log.Fetch = Fetch

        class Conn:
            log = Log

        self.conn = Conn

    def leader_address(self, topic, partition):
        return "h:1"

    def connection(self, address):
        return self.conn


def stored(base_offset, values):
    blob, count, max_ts = encode_batch([(1000 + i, None, v, ()) for i, v in enumerate(values)])
    return encode_stored_batch(base_offset, count, 5, max_ts, blob)


def answer(call, *batches):
    call.answer(pb.FetchResponse(topic="t", partition=call.request.partition, high_watermark=99,
                                 batches=b"".join(batches)))


@pytest.fixture
def fetcher():
    return Fetcher(FakeRouter(), threading.Condition(), fetch_bytes_max=1 << 20, fetch_wait_ms=100,
                   buffer_bytes_max=4 << 20)


def test_one_fenced_fetch_in_flight_per_partition(fetcher):
    fetcher.assign(A, 3)
    fetcher.assign(B, 0)
    fetcher.send(MEMBER)
    fetcher.send(MEMBER)
    requests = [c.request for c in fetcher.router.calls]
    assert sorted((r.partition, r.offset) for r in requests) == [(0, 3), (1, 0)]
    assert {(r.group, r.member_id, r.generation, r.max_wait_ms) for r in requests} == {("g", "m-1", 7, 100)}


def test_records_below_the_position_are_skipped_and_positions_advance(fetcher):
    fetcher.assign(A, 3)
    fetcher.send(MEMBER)
    answer(fetcher.router.calls[0], stored(0, [b"a", b"b", b"c", b"d", b"e"]), stored(5, [b"f", b"g"]))
    assert fetcher.collect() == []
    polled = fetcher.drain(3)
    assert len(polled) == 3 and polled.offsets() == {A: (3, 6)}
    assert [(r.offset, r.value, r.timestamp_ms) for r in polled] == [(3, b"d", 1003), (4, b"e", 1004), (5, b"f", 1000)]
    assert fetcher.position(A) == 6
    rest = fetcher.drain(100)
    assert [r.value for r in rest] == [b"g"] and fetcher.position(A) == 7
    fetcher.send(MEMBER)
    assert fetcher.router.calls[-1].request.offset == 7


def test_partitions_take_turns(fetcher):
    fetcher.assign(A, 0)
    fetcher.assign(B, 0)
    fetcher.send(MEMBER)
    for call in fetcher.router.calls:
        answer(call, stored(0, [b"x"] * 4), stored(4, [b"y"] * 4))
    fetcher.collect()
    first = fetcher.drain(8)
    assert first.partitions() == {A, B} and len(first) == 8
    assert len(fetcher.drain(100)) == 8 and not fetcher.buffered()


def test_a_seek_drops_the_answer_in_flight(fetcher):
    fetcher.assign(A, 0)
    fetcher.send(MEMBER)
    stale = fetcher.router.calls[0]
    fetcher.seek(A, 10)
    assert stale.was_cancelled
    answer(stale, stored(0, [b"old"]))
    fetcher.collect()
    assert len(fetcher.drain(10)) == 0 and fetcher.position(A) == 10
    fetcher.send(MEMBER)
    assert fetcher.router.calls[-1].request.offset == 10


def test_errors_are_returned_for_the_consumer_and_retries_wait(fetcher):
    fetcher.assign(A, 0)
    fetcher.send(MEMBER)
    fetcher.router.calls[0].answer(error=NotLeader("moved"))
    failures = fetcher.collect()
    assert [(tp, type(e)) for tp, e in failures] == [(A, NotLeader)] and fetcher.failures(A) == 1
    fetcher.retry_later(A, 60)
    fetcher.send(MEMBER)
    assert len(fetcher.router.calls) == 1


def test_a_full_buffer_stops_fetching_until_drained():
    fetcher = Fetcher(FakeRouter(), threading.Condition(), fetch_bytes_max=100, fetch_wait_ms=0,
                      buffer_bytes_max=100)
    fetcher.assign(A, 0)
    fetcher.send(MEMBER)
    answer(fetcher.router.calls[0], stored(0, [b"v" * 120]))
    fetcher.collect()
    fetcher.send(MEMBER)
    assert len(fetcher.router.calls) == 1
    fetcher.drain(10)
    fetcher.send(MEMBER)
    assert len(fetcher.router.calls) == 2


def test_removed_partitions_are_cancelled_and_forgotten(fetcher):
    fetcher.assign(A, 0)
    fetcher.send(MEMBER)
    fetcher.remove([A])
    assert fetcher.router.calls[0].was_cancelled and fetcher.positions() == {}
    answer(fetcher.router.calls[0], stored(0, [b"late"]))
    assert fetcher.collect() == [] and not fetcher.drain(10)


def test_empty_consumer_records():
    records = ConsumerRecords()
    assert len(records) == 0 and not records and list(records) == [] and records.offsets() == {}
