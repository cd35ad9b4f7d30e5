"""StorageSettings: the stores' files, their group commit, free space, the bound on open files, and the heap
(collector and C allocator) of a broker holding many replicas (docs/storage.md)."""
from __future__ import annotations

from dataclasses import dataclass

from raftbus.broker.section import require, setting


@dataclass(frozen=True)
class StorageSettings:
    TITLE = "Storage"

    storage_sync_interval_ms: int = setting(200, "LMDB group commit (fsync) period")
    storage_map_size_bytes: int = setting(64 * 1024 * 1024, "initial LMDB map per partition; grows on demand")
    storage_verify_on_open_bytes_max: int = setting(
        1024 * 1024 * 1024, "stream stores up to this size are re-read against their checksum when opened (-1: all, "
                            "0: none)")
    storage_free_bytes_min: int = setting(64 * 1024 * 1024, "below this much free space in data_dir the disk is full: "
                                                            "writes get DISK_FULL")
    storage_free_check_interval_ms: int = setting(1000, "how often the free space of data_dir is checked")
    storage_replicas_open_max: int = setting(
        0, "partition stores (and as many journals) kept open; past it idle ones close their files until used (0: "
           "from ulimit -n, see storage_fds_reserved)")
    storage_fds_reserved: int = setting(2048, "file descriptors left for sockets and the rest when "
                                              "storage_replicas_open_max is 0 (6 per open replica)")
    storage_raft_fds_reserved: int = setting(
        256, "file descriptors no client connection can take: Raft connections and handshakes, snapshot and "
             "compaction files (the client ports' connection bounds must leave them)")
    gc_freeze_interval_ms: int = setting(1000, "after replicas open, what is alive is frozen out of the collector's "
                                               "full passes this often (0: never; docs/storage.md)")
    gc_drops_collect_fraction: float = setting(0.1, "one full collection once this fraction of the hosted replicas "
                                                    "was dropped since the last one")
    malloc_mmap_threshold_bytes: int = setting(1024 * 1024, "C allocations this large get their own mapping, "
                                                            "returned when freed (glibc; 0: its default; "
                                                            "docs/storage.md)")
    malloc_trim_threshold_bytes: int = setting(16 * 1024 * 1024, "free C heap kept for reuse before it goes back to "
                                                                 "the system (glibc; 0: its default; broker/heap.py)")
    malloc_arenas_max: int = setting(2, "C heaps (glibc's malloc arenas) the broker's threads share at most, set "
                                        "when it starts (0: glibc's default, 8 per core; broker/heap.py)")
    malloc_trim_interval_ms: int = setting(10_000, "free pages inside the C heaps go back to the system this often "
                                                   "(glibc's malloc_trim; 0: never; broker/heap.py)")

    def validate(self) -> None:
        require(self.malloc_mmap_threshold_bytes >= 0, "malloc_mmap_threshold_bytes must be >= 0")
        require(self.malloc_trim_threshold_bytes >= 0, "malloc_trim_threshold_bytes must be >= 0")
        require(self.malloc_arenas_max >= 0, "malloc_arenas_max must be >= 0")
        require(self.malloc_trim_interval_ms >= 0, "malloc_trim_interval_ms must be >= 0")
        require(self.gc_freeze_interval_ms >= 0 and 0 < self.gc_drops_collect_fraction <= 1,
                "need gc_freeze_interval_ms >= 0 and 0 < gc_drops_collect_fraction <= 1")
        require(self.storage_replicas_open_max >= 0 and self.storage_fds_reserved >= 0,
                "storage_replicas_open_max and storage_fds_reserved must be >= 0")
        require(self.storage_raft_fds_reserved >= 64, "storage_raft_fds_reserved must be >= 64")
