"""Goal: the pipelined produce stream proposes requests in arrival order, answers each as its batch completes,
bounds what is unanswered, and answers bad or stuck requests without ending the stream."""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from types import SimpleNamespace

from raftbus.broker.log.produce_stream import ProducePipeline
from raftbus.client import errors
from raftbus.client.wire import raftbus_pb2 as pb
from tests.helpers import wait_until


class FakeLog:
    """Hands out one future per proposal and records the proposal order; the test completes them."""

    def __init__(self):
        self.proposed: list[int] = []
        self.futures: dict[int, Future] = {}
        self.lock = threading.Lock()

    def submit(self, request):
        if request.topic == "bad":
            raise errors.UnknownTopic("no such topic")
        future = Future()
        with self.lock:
            self.proposed.append(request.request_id)
            self.futures[request.request_id] = future
        return future

    def commit(self, request_id, base_offset):
        self.futures[request_id].set_result(SimpleNamespace(base_offset=base_offset, duplicate=False,
                                                            append_time_ms=5))


def requests(source: queue.Queue):
    while (item := source.get()) is not None:
        yield item


def start(pipeline, source):
    answers: queue.Queue = queue.Queue()

    def drain():
        for answer in pipeline.run(requests(source), lambda: True):
            answers.put(answer)
        answers.put(None)

    threading.Thread(target=drain, daemon=True).start()
    return answers


def request(request_id, topic="orders"):
    return pb.ProduceRequest(request_id=request_id, topic=topic, partition=0, record_count=1, records=b"x")


def test_requests_are_proposed_in_order_and_answered_as_they_complete():
    log = FakeLog()
    source: queue.Queue = queue.Queue()
    answers = start(ProducePipeline(log.submit, in_flight_max=8, timeout_s=30, typed=lambda e: e), source)
    for i in (1, 2, 3):
        source.put(request(i))
    wait_until(lambda: log.proposed == [1, 2, 3], 5, what="three proposals in order")
    log.commit(3, 12)
    log.commit(1, 10)
    assert [answers.get(timeout=5).request_id for _ in range(2)] == [3, 1]
    log.commit(2, 11)
    last = answers.get(timeout=5)
    assert (last.request_id, last.base_offset) == (2, 11)
    source.put(None)
    assert answers.get(timeout=5) is None


def test_a_bad_request_is_answered_at_once_and_the_stream_goes_on():
    log = FakeLog()
    source: queue.Queue = queue.Queue()
    answers = start(ProducePipeline(log.submit, in_flight_max=8, timeout_s=30, typed=lambda e: e), source)
    source.put(request(1, topic="bad"))
    source.put(request(2))
    first = answers.get(timeout=5)
    assert (first.request_id, first.error.code) == (1, "UNKNOWN_TOPIC")
    wait_until(lambda: log.proposed == [2], 5, what="the next request proposed")
    log.commit(2, 0)
    assert answers.get(timeout=5).request_id == 2
    source.put(None)
    assert answers.get(timeout=5) is None


def test_no_more_than_in_flight_max_requests_are_unanswered():
    log = FakeLog()
    source: queue.Queue = queue.Queue()
    answers = start(ProducePipeline(log.submit, in_flight_max=2, timeout_s=30, typed=lambda e: e), source)
    for i in range(1, 6):
        source.put(request(i))
    wait_until(lambda: log.proposed == [1, 2], 5, what="two proposals")
    assert answers.empty() and log.proposed == [1, 2]
    log.commit(1, 0)
    wait_until(lambda: log.proposed == [1, 2, 3], 5, what="a third proposal once one is answered")
    for i in (2, 3):
        log.commit(i, i)
    wait_until(lambda: len(log.proposed) == 5, 5, what="the rest proposed")
    for i in (4, 5):
        log.commit(i, i)
    source.put(None)
    ids = []
    while (answer := answers.get(timeout=5)) is not None:
        ids.append(answer.request_id)
    assert sorted(ids) == [1, 2, 3, 4, 5]


def test_a_request_not_committed_in_time_is_answered_timed_out():
    log = FakeLog()
    source: queue.Queue = queue.Queue()
    answers = start(ProducePipeline(log.submit, in_flight_max=4, timeout_s=0.2, typed=lambda e: e), source)
    source.put(request(1))
    answer = answers.get(timeout=5)
    assert (answer.request_id, answer.error.code) == (1, "REQUEST_TIMED_OUT")
    log.commit(1, 0)  # a late commit is not answered twice
    source.put(None)
    assert answers.get(timeout=5) is None
