"""Goal: a Raft loop pass that blocks past `raft_loop_stall_report_ms` is logged while it runs, with the loop
thread's stack naming what blocks it, once per pass, and its whole length once it ends; short passes are not."""
import logging
import re
import threading
import time

from raftbus.broker.raft.loop import RaftLoop


class _IdleHub:
    def __init__(self):
        self.woken = threading.Event()
        self.on_woken = lambda: None

    def poll(self, timeout_s):
        self.woken.wait(timeout_s)
        self.woken.clear()
        self.on_woken()

    def has_pending(self):
        return False

    def flush(self):
        pass

    def connected_peers(self):
        return set()

    def wakeup(self):
        self.woken.set()


def wait_for(predicate, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def a_call_that_blocks_the_loop():
    time.sleep(0.6)
    return "done"


def stalled_loop(caplog, *calls) -> RaftLoop:
    """A loop reporting passes over 200 ms, made to run `calls` in turn, stopped once the last pass's length is
    logged."""
    caplog.set_level(logging.WARNING)
    loop = RaftLoop(tick_interval_ms=20, stall_report_ms=200)
    loop.attach(_IdleHub())
    loop.start()
    try:
        for call in calls:
            assert loop.call(call, timeout_s=30) in ("quick", "done")
            if call is quick:
                assert loop.stalls.reports == 0
        wait_for(lambda: any("pass took" in r.getMessage() for r in caplog.records))
    finally:
        loop.stop()
    return loop


def quick():
    return "quick"


def test_a_blocked_pass_is_reported_with_the_loop_stack_once_then_its_length(caplog):
    loop = stalled_loop(caplog, quick, a_call_that_blocks_the_loop)
    running = [r.getMessage() for r in caplog.records if "pass running for" in r.getMessage()]
    assert len(running) == 1 and loop.stalls.reports == 1  # one report for the pass, not one per check
    assert "a_call_that_blocks_the_loop" in running[0] and "time.sleep" in running[0]
    took = [_took_ms(r.getMessage()) for r in caplog.records if "pass took" in r.getMessage()]
    assert len(took) == 1 and took[0][0] >= 600
    assert took[0][1] < 300  # asleep, not on a CPU: the report says the pass waited


def a_call_that_works_on_the_loop():
    started = time.thread_time()
    while time.thread_time() - started < 0.6:
        pass
    return "done"


def test_a_pass_that_worked_reports_its_cpu_time(caplog):
    stalled_loop(caplog, a_call_that_works_on_the_loop)
    [(took_ms, cpu_ms)] = [_took_ms(r.getMessage()) for r in caplog.records if "pass took" in r.getMessage()]
    assert cpu_ms >= 600 and took_ms >= cpu_ms


def _took_ms(message: str) -> tuple[int, int]:
    """(the pass's length, its CPU time on the loop thread) from "raft loop pass took N ms, M ms of it ..."."""
    match = re.fullmatch(r"raft loop pass took (\d+) ms, (\d+) ms of it on the loop thread's CPU", message)
    assert match, message
    return int(match[1]), int(match[2])


def test_no_report_when_off_or_between_passes(caplog):
    caplog.set_level(logging.WARNING)
    loop = RaftLoop(tick_interval_ms=20)  # stall_report_ms 0: no watcher
    loop.attach(_IdleHub())
    loop.start()
    try:
        assert loop.call(a_call_that_blocks_the_loop, timeout_s=5) == "done"
    finally:
        loop.stop()
    assert loop.stalls._thread is None and not caplog.records
    idle = RaftLoop(stall_report_ms=100)
    idle._thread_id = threading.get_ident()
    assert idle.pass_started_s is None and not idle.stalls.check(idle.clock() + 10)  # waiting is no stall
