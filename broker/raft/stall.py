"""Loop stall reports: a pass of the Raft loop that runs longer than `raft_loop_stall_report_ms` is logged with
the loop thread's stack, taken while the pass is still running.

Every group of a broker lives on one loop thread, so a pass that blocks (a slow call, a long copy, a lock held
elsewhere) silences all of them at once: past the election timeout the other brokers elect new leaders for every
group this one led. The report names what the loop was doing at that moment; a second line gives the pass's
whole length once it ends, with the loop thread's CPU time in it (a pass that took far longer than its CPU time
waited for a core or for the GIL, not on its own work). A watcher thread checks every quarter of the threshold; it reads the loop's
`pass_started_s`, clock and thread id and nothing else.
"""
from __future__ import annotations

import logging
import sys
import threading
import traceback

from raftbus.broker.raft.clock import thread_cpu_s

log = logging.getLogger(__name__)


class LoopStallReporter:
    def __init__(self, loop, report_ms: int):
        self.loop = loop
        self.report_s = report_ms / 1000
        self.reports = 0
        self._reported_pass: float | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "LoopStallReporter":
        if self.report_s > 0:
            self._thread = threading.Thread(target=self._run, name="raftbus-loop-stall", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(1.0)

    def _run(self) -> None:
        while not self._stopping.wait(self.report_s / 4):
            self.check(self.loop.clock())

    def pass_ended(self, started_s: float | None, started_cpu_s: float) -> None:
        """The loop finished the pass that began at `started_s`, the loop thread's CPU time then `started_cpu_s`
        (loop thread): its length if it was a stall, and how much of it the loop thread spent on a CPU. The rest it
        waited: for a core, for the GIL while another thread of the broker ran Python, or in a blocking call."""
        if started_s is not None and self.report_s:
            took_s = self.loop.clock() - started_s
            if took_s >= self.report_s:
                cpu_s = thread_cpu_s() - started_cpu_s
                log.warning("raft loop pass took %d ms, %d ms of it on the loop thread's CPU",
                            took_s * 1000, cpu_s * 1000)

    def check(self, now_s: float) -> bool:
        """Report the running pass if it has lasted `report_ms` and was not reported yet; whether it did."""
        started_s, thread_id = self.loop.pass_started_s, self.loop.thread_id
        if started_s is None or thread_id is None or now_s - started_s < self.report_s:
            return False
        if self._reported_pass == started_s:
            return False
        self._reported_pass = started_s
        frame = sys._current_frames().get(thread_id)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no frame)\n"
        self.reports += 1
        log.warning("raft loop pass running for %d ms (raft_loop_stall_report_ms %d); the loop thread is at:\n%s",
                    (now_s - started_s) * 1000, self.report_s * 1000, stack.rstrip())
        return True
