"""Whether the disk under a broker's data directory has room: a full disk is a state, not a crash.

Below `free_bytes_min` free bytes the disk counts as full: the broker's groups take no new writes (DISK_FULL)
and hand their leaderships to replicas with room; reads and leadership transfer go on. Writes resume once the
free space is back above the bound. The reserve keeps room for what is already in flight: journal entries of
commands accepted before the check noticed, and the replicated entries a follower must still journal.
"""
from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


class DiskSpace:
    def __init__(self, path, free_bytes_min: int, statvfs=os.statvfs):
        self.path = str(path)
        self.free_bytes_min = free_bytes_min
        self._statvfs = statvfs
        self.full = False
        self.free_bytes: int | None = None

    def check(self) -> bool:
        """Measure the free space now; True when `full` changed."""
        try:
            stat = self._statvfs(self.path)
        except OSError as exc:
            log.warning("cannot measure the free space of %s: %s", self.path, exc)
            return False
        self.free_bytes = stat.f_bavail * stat.f_frsize
        full = self.free_bytes < self.free_bytes_min
        if full == self.full:
            return False
        self.full = full
        if full:
            log.error("disk full: %d bytes free under %s (storage_free_bytes_min=%d); refusing writes",
                      self.free_bytes, self.path, self.free_bytes_min)
        else:
            log.warning("disk has room again: %d bytes free under %s; taking writes", self.free_bytes, self.path)
        return True
