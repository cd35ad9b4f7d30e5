"""The Raft machinery's clock: monotonic seconds, as a callable (`Clock`).

The broker's Raft loop holds one (`RaftLoop.clock`) and hands it to every group, its Raft core, the quiescence and
the sender; the transport, the group commit and the replica opener take one too. `monotonic_s` is the system's,
their default; `thread_cpu_s` is the calling thread's CPU time. No other module under broker/raft reads the time (tests/unit/broker/raft/test_raft_boundaries.py).
"""
from __future__ import annotations

import time
from typing import Callable

Clock = Callable[[], float]

monotonic_s: Clock = time.monotonic
# CPU seconds of the calling thread: the stall reports (stall.py) tell a pass that worked from one that waited.
thread_cpu_s: Clock = time.thread_time
