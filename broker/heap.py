"""Short garbage-collector pauses on a broker hosting thousands of replicas.

CPython's collector stops every thread of the process for a full pass over every container object it tracks, and
a broker's long-lived objects (each replica's Raft group, state machine, store and their dicts) grow with the
replicas it hosts. A pass long enough leaves the broker silent for longer than `raft_liveness_timeout_ms`: its
peers wake the groups it leads and elect again (docs/performance.md, "Many partitions", has the pause times).

So once a second (`gc_freeze_interval_ms`), after replicas were opened, the Raft loop collects the two young
generations (their cyclic garbage is freed, not frozen) and moves every object alive into the collector's
permanent generation (`gc.freeze`): later full passes skip them. A cycle that had already reached the old
generation when it became garbage is frozen with the rest and waits for the next full pass. Frozen objects are
still freed by reference counting when nothing refers to them; only reference cycles among them wait. A dropped
replica leaves such cycles (a group and its Raft object refer to each other), so once the replicas dropped since
the last full pass reach `gc_drops_collect_fraction` of those hosted (at least `DROPS_MIN`), the loop unfreezes,
runs one full pass, and freezes again: memory held by dropped replicas stays bounded, at the price of one full
pause per that many drops.

The C heap: each LMDB environment mallocs ~3 MiB of transaction lists when it opens and frees them when it
closes. glibc serves an allocation that large from its own mapping, but after the first such free it raises its
threshold and serves the next ones from the heap, whose freed pages it keeps, so a broker parking and reopening
stores would grow with every reopen (docs/storage.md, "The C heap under parking"). So the broker holds glibc's
mmap threshold at `malloc_mmap_threshold_bytes` (1 MiB): allocations that large always get a mapping of their own,
returned to the system when freed (`pin_malloc_mmap_threshold`).

Holding the mmap threshold also holds glibc's trim threshold at its 128 KiB default: whenever more than that is
free at the top of a heap, it goes back to the system, and the next large allocation faults it in and zeroes it
again. Under a produce load every batch (up to a MiB) is copied through several such buffers per replica, each
faulted in and zeroed afresh. So the broker also holds the trim threshold at `malloc_trim_threshold_bytes`
(16 MiB; `hold_malloc_trim_threshold`): up to that much stays free at the top of each heap for the next batch, at
the price of that much more RSS (docs/performance.md, "Produce", has what it saves).

Each thread of a process allocates from a C heap of its own (a glibc arena) until there are 8 per core, and each
heap keeps its own free top and its own fragments. A broker's threads come and go with its clients and its peers
(gRPC's handler threads, a produce stream's reader), so a peer's death, which brings its clients and the entries
held for it, grows heaps that stay. So the broker lets its threads share at most `malloc_arenas_max` heaps (2),
set when it starts, before its threads allocate (`limit_malloc_arenas`; docs/performance.md, "Soak", has what it
changed).

Free pages inside a heap, below its top, go back only when glibc is asked (`malloc_trim`). A broker's Raft
entries are held in memory until they are applied everywhere (in allocations of a batch each, below the mmap
threshold); releasing them frees them in the middle of the heaps of the threads that made them, so without a trim
the broker's anonymous memory keeps the high-water mark of the entries it held. So every `malloc_trim_interval_ms`
(10 s) a thread of its own (`HeapTrimmer`) asks glibc to return every free page of every heap; the next
allocations there fault pages in again, once per interval instead of once per batch. The call runs without the
GIL; it takes each heap's lock in turn, so a thread allocating from the heap being trimmed waits for it
(docs/storage.md, "Free pages inside the heaps", has what a trim returns and how long it takes).
"""
from __future__ import annotations

import ctypes
import gc
import logging
import threading
import time

from raftbus.broker.process_stats import anonymous_bytes

log = logging.getLogger(__name__)

DROPS_MIN = 16
_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def pin_malloc_mmap_threshold(threshold_bytes: int) -> bool:
    """Hold the C library's mmap threshold at `threshold_bytes` (glibc; 0 leaves it alone). True when set."""
    return _mallopt(_M_MMAP_THRESHOLD, threshold_bytes)


def limit_malloc_arenas(count: int) -> bool:
    """Let the process's threads share at most `count` C heaps (glibc's malloc arenas; 0 leaves glibc's limit of 8
    per core). Takes effect for arenas created after it, so call it before threads allocate. True when set."""
    return _mallopt(_M_ARENA_MAX, count)


def hold_malloc_trim_threshold(threshold_bytes: int) -> bool:
    """Return free memory at the top of a heap to the system only past `threshold_bytes` (glibc; 0 leaves glibc's
    own threshold). True when set."""
    return _mallopt(_M_TRIM_THRESHOLD, threshold_bytes)


def trim_heap() -> bool:
    """Return every free page of every heap to the system (glibc's malloc_trim). True when glibc gave some back;
    False also where there is no glibc."""
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    return bool(malloc_trim(0))


class HeapTrimmer:
    """Trims the C heaps every `interval_ms` on a thread of its own (registry thread `raftbus-heap-trim`)."""

    def __init__(self, interval_ms: int, *, trim=trim_heap, anonymous=anonymous_bytes, clock=time.monotonic):
        self.interval_s = interval_ms / 1000
        self._trim, self._anonymous, self._clock = trim, anonymous, clock
        self._lock = threading.Lock()
        self.trims = 0
        self.busy_s = 0.0
        self.longest_ms = 0.0
        self.returned_bytes = 0

    def run(self, stopping: threading.Event) -> None:
        if self.interval_s <= 0:
            return
        while not stopping.wait(self.interval_s):
            self.trim_once()

    def trim_once(self) -> None:
        before = self._anonymous()
        started = self._clock()
        self._trim()
        took = self._clock() - started
        returned = max(0, before - self._anonymous())
        with self._lock:
            self.trims += 1
            self.busy_s += took
            self.longest_ms = max(self.longest_ms, took * 1000)
            self.returned_bytes += returned

    def stats(self) -> dict:
        """BrokerStats' heap figures (any thread)."""
        with self._lock:
            return {"heap_trims": self.trims, "heap_trim_busy_s": self.busy_s,
                    "heap_trim_longest_ms": self.longest_ms, "heap_trim_returned_bytes": self.returned_bytes}


def _mallopt(parameter: int, value: int) -> bool:
    if value <= 0:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc: nothing to hold
        return False
    return bool(mallopt(parameter, value))


class FrozenHeap:
    """Freezes what is alive after replicas open; a full pass after enough drops (loop thread)."""

    def __init__(self, drops_collect_fraction: float, *, collector=gc, clock=time.monotonic):
        self.drops_collect_fraction = drops_collect_fraction
        self._gc = collector
        self._clock = clock
        self._grown = False
        self._dropped = 0
        self.freezes = 0
        self.full_collections = 0

    def grew(self) -> None:
        """Replicas were opened: freeze at the next tick."""
        self._grown = True

    def dropped(self) -> None:
        """A replica was dropped: its cycles wait for the next full pass."""
        self._dropped += 1

    def tick(self, hosted: int) -> None:
        if self._dropped >= max(DROPS_MIN, int(hosted * self.drops_collect_fraction)):
            started = self._clock()
            self._gc.unfreeze()
            self._gc.collect()
            self._gc.freeze()
            self._dropped, self._grown = 0, False
            self.full_collections += 1
            log.info("full garbage collection after dropped replicas", extra={
                "pause_ms": round((self._clock() - started) * 1000), "frozen": self._gc.get_freeze_count()})
            return
        if self._grown:
            self._gc.collect(1)
            self._gc.freeze()
            self._grown = False
            self.freezes += 1
