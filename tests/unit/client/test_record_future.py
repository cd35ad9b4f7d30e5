"""Goal: a record's future behaves as a concurrent.futures.Future (result, exception, callbacks once and in record
order, wait/as_completed, no cancel) while its batch settles every record in one step."""
import threading
from concurrent.futures import FIRST_EXCEPTION, Future, as_completed, wait

import pytest

from raftbus.client.errors import NotLeader, RequestTimedOut
from raftbus.client.record_future import BatchOutcome, RecordFuture
from raftbus.client.records import RecordMetadata


def futures_of(outcome, count, first_ts=100):
    return [RecordFuture(outcome, i, first_ts + i) for i in range(count)]


def test_result_is_the_records_offset_in_its_batch():
    outcome = BatchOutcome("t", 2)
    futures = futures_of(outcome, 3)
    assert [f.done() for f in futures] == [False] * 3 and all(f.running() for f in futures)
    assert outcome.settle(40, None) is True
    assert [f.result(0) for f in futures] == [RecordMetadata("t", 2, 40 + i, 100 + i) for i in range(3)]
    assert all(f.done() and f.exception() is None for f in futures)
    assert isinstance(futures[0], Future)


def test_an_error_fails_every_record_of_the_batch():
    outcome = BatchOutcome("t", 0)
    futures = futures_of(outcome, 2)
    err = NotLeader("moved")
    outcome.settle(-1, err)
    for future in futures:
        assert future.exception(0) is err
        with pytest.raises(NotLeader):
            future.result(0)


def test_a_batch_settles_once():
    outcome = BatchOutcome("t", 0)
    future = RecordFuture(outcome, 0, 1)
    assert outcome.settle(7, None) is True
    assert outcome.settle(-1, RequestTimedOut("late")) is False
    assert future.result(0).offset == 7


def test_result_waits_for_the_batch_and_times_out_without_it():
    outcome = BatchOutcome("t", 0)
    future = RecordFuture(outcome, 1, 1)
    with pytest.raises(TimeoutError):
        future.result(0.01)
    timer = threading.Timer(0.05, outcome.settle, args=(10, None))
    timer.start()
    assert future.result(5).offset == 11
    timer.join()


def test_callbacks_run_once_each_in_record_order_and_late_ones_at_once():
    outcome = BatchOutcome("t", 0)
    futures = futures_of(outcome, 4)
    seen = []
    for future in (futures[2], futures[0], futures[3]):  # added out of record order
        future.add_done_callback(lambda f: seen.append(f.result().offset))
    futures[0].add_done_callback(lambda f: seen.append("second on 0"))
    outcome.settle(0, None)
    outcome.settle(5, None)
    assert seen == [0, "second on 0", 2, 3]
    futures[1].add_done_callback(lambda f: seen.append(f.result().offset))  # already done: runs now
    assert seen == [0, "second on 0", 2, 3, 1]


def test_a_failing_callback_does_not_stop_the_others():
    outcome = BatchOutcome("t", 0)
    futures = futures_of(outcome, 2)
    seen = []
    futures[0].add_done_callback(lambda f: 1 / 0)
    futures[1].add_done_callback(lambda f: seen.append(f.result().offset))
    outcome.settle(3, None)
    assert seen == [4]


def test_accepted_records_cannot_be_cancelled_or_settled_by_callers():
    future = RecordFuture(BatchOutcome("t", 0), 0, 1)
    assert future.cancel() is False and future.cancelled() is False
    with pytest.raises(RuntimeError):
        future.set_result(None)
    with pytest.raises(RuntimeError):
        future.set_exception(ValueError())


def test_concurrent_futures_wait_and_as_completed_see_every_record():
    first, second = BatchOutcome("t", 0), BatchOutcome("t", 1)
    futures = futures_of(first, 2) + futures_of(second, 2)
    first.settle(0, None)
    done, not_done = wait(futures, timeout=0.01)
    assert done == set(futures[:2]) and not_done == set(futures[2:])
    threading.Timer(0.05, second.settle, args=(-1, RequestTimedOut("x"))).start()
    done, not_done = wait(futures, timeout=5, return_when=FIRST_EXCEPTION)
    assert not_done == set()
    assert set(as_completed(futures, timeout=5)) == set(futures)
    assert {f.exception() is None for f in futures[2:]} == {False}
