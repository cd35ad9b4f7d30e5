"""What a broker reports about its process in BrokerStats: memory, CPU, uptime, groups, the group-commit window,
its faults and its heap trims."""
from __future__ import annotations

import os
import time

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
_MISSING = -1.0


def _statm() -> list[int]:
    """/proc/self/statm (Linux): size, resident, shared (file-backed and shmem) ... in pages; [] where unknown."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def resident_bytes() -> int:
    """Resident memory of this process now (Linux /proc), 0 where unknown."""
    pages = _statm()
    return pages[1] * _PAGE_BYTES if len(pages) > 1 else 0


def anonymous_bytes() -> int:
    """Resident anonymous memory of this process now (RssAnon: resident less file-backed and shared), 0 where
    unknown."""
    pages = _statm()
    return (pages[1] - pages[2]) * _PAGE_BYTES if len(pages) > 2 else 0


class ProcessStats:
    """Called from any thread (AdminService.broker_stats)."""

    def __init__(self, loop, group_commit, faults, heap_trimmer=None):
        self.loop = loop
        self.heap_trimmer = heap_trimmer
        self.group_commit = group_commit
        self.faults = faults
        self.started_monotonic = time.monotonic()

    def __call__(self) -> dict:
        times = os.times()
        groups = list(self.loop.groups.values())
        window = self.group_commit.percentiles()
        quiescence = self.loop.quiescence
        return {
            "rss_bytes": resident_bytes(), "cpu_user_s": times.user, "cpu_system_s": times.system,
            "uptime_s": time.monotonic() - self.started_monotonic, "groups_hosted": len(groups),
            "groups_led": sum(1 for g in groups if g.is_leader), "raft_log_bytes": sum(g.log_bytes for g in groups),
            "durability_window_p50_ms": _or_missing(window["p50_ms"]),
            "durability_window_p99_ms": _or_missing(window["p99_ms"]),
            "durability_window_max_ms": _or_missing(window["max_ms"]),
            "group_commit_rounds": self.group_commit.rounds, "pid": os.getpid(), **self.faults.stats(),
            "groups_quiesced": len(quiescence.quiesced) if quiescence is not None else 0,
            **(self.heap_trimmer.stats() if self.heap_trimmer is not None else {}),
        }


def _or_missing(value):
    return value if value is not None else _MISSING
