"""Goal: after replicas open the broker freezes what is alive (the collector's full passes skip it), and once enough
replicas were dropped it runs one full pass over everything, so cycles of dropped replicas are freed."""
import gc
import weakref

from raftbus.broker.heap import DROPS_MIN, FrozenHeap


class RecordingCollector:
    def __init__(self):
        self.calls = []

    def collect(self, generation=2):
        self.calls.append(("collect", generation))

    def freeze(self):
        self.calls.append(("freeze",))

    def unfreeze(self):
        self.calls.append(("unfreeze",))

    def get_freeze_count(self):
        return 0


def test_a_tick_freezes_only_after_replicas_opened_and_young_garbage_is_collected_first():
    collector = RecordingCollector()
    heap = FrozenHeap(0.1, collector=collector)
    heap.tick(hosted=100)
    assert collector.calls == []
    heap.grew()
    heap.grew()
    heap.tick(hosted=100)
    heap.tick(hosted=100)
    assert collector.calls == [("collect", 1), ("freeze",)] and heap.freezes == 1


def test_dropped_replicas_bring_one_full_pass_once_they_reach_the_fraction():
    collector = RecordingCollector()
    heap = FrozenHeap(0.1, collector=collector)
    for _ in range(99):
        heap.dropped()
    heap.tick(hosted=1000)  # 99 < 10 % of 1,000
    assert collector.calls == []
    heap.dropped()
    heap.grew()
    heap.tick(hosted=1000)
    assert collector.calls == [("unfreeze",), ("collect", 2), ("freeze",)] and heap.full_collections == 1
    heap.tick(hosted=1000)  # the drops and the growth were both settled by that pass
    assert len(collector.calls) == 3
    for _ in range(DROPS_MIN - 1):
        heap.dropped()
    heap.tick(hosted=10)  # few hosted: still at least DROPS_MIN drops
    assert len(collector.calls) == 3


def test_frozen_cycles_are_freed_by_the_full_pass_after_drops():
    class Replica:
        pass

    heap = FrozenHeap(0.5)
    gc.collect()
    replicas = []
    for _ in range(DROPS_MIN):
        a, b = Replica(), Replica()
        a.peer, b.peer = b, a  # a cycle, as a group and its Raft object make
        replicas.append(a)
    del a, b
    alive = [weakref.ref(r) for r in replicas]
    heap.grew()
    heap.tick(hosted=DROPS_MIN)
    try:
        assert gc.get_freeze_count() > 0
        replicas.clear()
        gc.collect()
        assert all(ref() is not None for ref in alive)  # frozen cycles survive ordinary passes
        for _ in range(DROPS_MIN):
            heap.dropped()
        heap.tick(hosted=DROPS_MIN)
        assert heap.full_collections == 1
        assert all(ref() is None for ref in alive)
    finally:
        gc.unfreeze()


def test_the_mmap_and_trim_thresholds_are_held_on_glibc_and_left_alone_at_zero():
    import platform

    from raftbus.broker.heap import hold_malloc_trim_threshold, pin_malloc_mmap_threshold
    from raftbus.broker.settings import load_settings

    assert pin_malloc_mmap_threshold(0) is False
    assert hold_malloc_trim_threshold(0) is False
    if platform.libc_ver()[0] == "glibc":
        assert pin_malloc_mmap_threshold(1 << 20) is True
        assert hold_malloc_trim_threshold(16 << 20) is True
    assert load_settings().storage.malloc_mmap_threshold_bytes == 1 << 20
    assert load_settings().storage.malloc_trim_threshold_bytes == 16 << 20


def test_a_trim_returns_free_pages_in_the_middle_of_the_heap():
    """Goal: memory freed below a live allocation stays resident until trim_heap asks glibc for it back."""
    import platform

    from raftbus.broker.heap import anonymous_bytes, hold_malloc_trim_threshold, pin_malloc_mmap_threshold, trim_heap

    if platform.libc_ver()[0] != "glibc":
        assert trim_heap() is False
        return
    pin_malloc_mmap_threshold(1 << 20)
    hold_malloc_trim_threshold(16 << 20)
    chunks = [bytearray(50_000) for _ in range(1_300)]  # ~65 MB of batch-sized blocks below the mmap threshold
    for chunk in chunks:
        chunk[::4096] = b"x" * len(chunk[::4096])  # touch every page
    pinned = bytearray(50_000)  # a live block above them: the free space is not at the heap's top
    chunks.clear()
    before = anonymous_bytes()
    assert trim_heap() is True
    assert before - anonymous_bytes() >= 32_000_000
    del pinned


def test_the_trimmer_counts_its_trims_and_what_they_returned():
    import threading

    from raftbus.broker.heap import HeapTrimmer

    anonymous = iter([500, 300, 300, 400])  # before and after each of two trims
    times = iter([1.0, 1.004, 2.0, 2.010])
    trimmer = HeapTrimmer(10_000, trim=lambda: True, anonymous=lambda: next(anonymous), clock=lambda: next(times))
    trimmer.trim_once()
    trimmer.trim_once()  # memory grew meanwhile: nothing counted as returned
    stats = trimmer.stats()
    assert stats["heap_trims"] == 2 and stats["heap_trim_returned_bytes"] == 200
    assert abs(stats["heap_trim_busy_s"] - 0.014) < 1e-9 and abs(stats["heap_trim_longest_ms"] - 10.0) < 1e-6
    stopping = threading.Event()
    off = HeapTrimmer(0, trim=lambda: (_ for _ in ()).throw(AssertionError("trimmed while off")))
    off.run(stopping)  # returns at once without trimming
    assert off.stats()["heap_trims"] == 0


ARENAS_SCRIPT = """
import ctypes, sys, threading
from raftbus.broker.heap import limit_malloc_arenas
limit = int(sys.argv[1])
if limit:
    assert limit_malloc_arenas(limit)
held, ready, done = [], threading.Barrier(7), threading.Event()
def allocate():
    held.append(bytearray(300_000))  # a malloc in this thread, from the heap it is given
    ready.wait()
    done.wait()
threads = [threading.Thread(target=allocate) for _ in range(6)]
for thread in threads:
    thread.start()
ready.wait()
ctypes.CDLL(None).malloc_stats()  # one "Arena N:" paragraph per heap, on stderr
done.set()
for thread in threads:
    thread.join()
"""


def test_the_threads_of_a_process_share_at_most_malloc_arenas_max_heaps():
    """Goal: with the limit set before its threads allocate, six threads share two C heaps; without it glibc gives
    them heaps of their own (so the count can tell the two apart)."""
    import platform
    import subprocess
    import sys

    from raftbus.broker.heap import limit_malloc_arenas
    from raftbus.broker.settings import load_settings

    assert limit_malloc_arenas(0) is False
    assert load_settings().storage.malloc_arenas_max == 2
    if platform.libc_ver()[0] != "glibc":
        return

    def arenas(limit: int) -> int:
        done = subprocess.run([sys.executable, "-c", ARENAS_SCRIPT, str(limit)], capture_output=True, text=True,
                              timeout=60, check=True)
        return sum(1 for line in done.stderr.splitlines() if line.startswith("Arena "))

    assert arenas(2) <= 2
    assert arenas(0) > 2
