"""Goal: reads share barriers (one in flight per partition), a read waits for a barrier proposed after it
arrived, a barrier that fails or returns an error fails exactly the reads waiting for it, and a barrier that
never answers is given up after its stale time."""
from concurrent.futures import Future

import pytest

from raftbus.broker import commands
from raftbus.broker.log.read_barrier import ReadBarrier
from raftbus.client import errors


class Proposals:
    """A fake Raft group: keeps each proposed barrier's future for the test to complete."""

    def __init__(self):
        self.futures: list[Future] = []

    def submit(self, command: bytes) -> Future:
        assert command == commands.READ_BARRIER_COMMAND
        future = Future()
        self.futures.append(future)
        return future


def test_reads_during_a_barrier_share_the_next_one_proposed_after_it_commits():
    raft = Proposals()
    barrier = ReadBarrier(raft.submit, 5.0)
    first = barrier.confirm()
    second, third = barrier.confirm(), barrier.confirm()
    assert len(raft.futures) == 1 and second is third and not second.done()
    raft.futures[0].set_result(None)
    assert first.result(0) is None and not second.done()  # the first barrier was proposed before they arrived
    assert len(raft.futures) == 2
    raft.futures[1].set_result(None)
    assert second.result(0) is None
    fourth = barrier.confirm()
    assert len(raft.futures) == 3 and not fourth.done()


@pytest.mark.parametrize("outcome", [errors.NotLeader("deposed"), errors.InternalError("broken")])
def test_a_failed_barrier_fails_its_reads_and_the_next_reads_get_a_new_one(outcome):
    raft = Proposals()
    barrier = ReadBarrier(raft.submit, 5.0)
    waiting = barrier.confirm()
    if isinstance(outcome, errors.NotLeader):
        raft.futures[0].set_exception(outcome)
    else:
        raft.futures[0].set_result(outcome)  # a state machine answers with a typed error value
    with pytest.raises(type(outcome)):
        waiting.result(0)
    again = barrier.confirm()
    assert len(raft.futures) == 2
    raft.futures[1].set_result(None)
    assert again.result(0) is None


def test_a_barrier_that_completes_at_once_serves_the_read():
    def submit(command):
        done = Future()
        done.set_result(None)
        return done
    barrier = ReadBarrier(submit, 5.0)
    assert barrier.confirm().result(0) is None and barrier.confirm().result(0) is None


def test_a_barrier_that_never_answers_is_given_up_and_its_late_answer_changes_nothing():
    raft = Proposals()
    now = [0.0]
    barrier = ReadBarrier(raft.submit, 5.0, clock=lambda: now[0])
    stuck = barrier.confirm()
    waiting = barrier.confirm()
    now[0] = 5.1
    fresh = barrier.confirm()
    assert fresh is waiting and len(raft.futures) == 2  # a new barrier, for the reads that waited
    raft.futures[0].set_result(None)  # the given-up barrier answers late
    assert stuck.result(0) is None and not fresh.done() and len(raft.futures) == 2
    raft.futures[1].set_result(None)
    assert fresh.result(0) is None
