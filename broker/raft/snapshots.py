"""A group's snapshots: when to take one, the store copy made off the loop thread, and reading the copy back.

A snapshot is the group's store copied at an applied index A and the footer (`snapshot_footer`: the log entries
A - 1 and A, the configuration), written and fsynced by `SnapshotWriter` on a thread of its own from a pinned read
transaction, then handed to the Raft core, which snapshots at A once its compaction point reached it: its serializer
only renames the file into place. The entries after A stay in the log; a footer of entries after A (none are
written) is replayed on load.
"""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from raftbus.broker.raft import retire, snapshot_footer
from raftbus.broker.raft.pysyncobj import REGULAR
from raftbus.broker.raft.settings import RaftSettings
from raftbus.broker.storage.private import private_opener

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "raft.snapshot"  # a group's snapshot, in its data directory


def compaction_due(settings: RaftSettings, log_bytes: int, entries: int, store_bytes) -> bool:
    """Whether a group should snapshot now, after `log_bytes` in `entries` applied since its last snapshot.

    A snapshot copies the whole store, so it waits until that log is at least 1/snapshot_copy_ratio_max of the
    store (`store_bytes()`, asked only then): each written byte is copied at most that many times however large
    the partition grows. The log held in memory is bounded regardless (log_bytes_max, log_entries_max).
    """
    if log_bytes >= settings.log_bytes_max or entries >= settings.log_entries_max:
        return True
    if log_bytes < settings.log_compaction_bytes and entries < settings.log_compaction_entries:
        return False
    return store_bytes() <= settings.snapshot_copy_ratio_max * log_bytes


class SnapshotWriter:
    """Writes a snapshot file on a thread of its own: a pinned store view copied to `snapshot.partial`, the
    footer after it, fsynced, renamed to `snapshot.ready`."""

    def __init__(self, data_dir: Path):
        self.partial = data_dir / "snapshot.partial"
        self.ready = data_dir / "snapshot.ready"
        self._thread: threading.Thread | None = None
        self.ready_index: int | None = None
        self.ready_last: tuple[int, int] | None = None  # (index, term) of the ready snapshot's last entry
        self.failed = False
        for stale in (self.partial, self.ready):
            stale.unlink(missing_ok=True)
        retire.remove_retired(str(data_dir / SNAPSHOT_FILE))  # old snapshots a crash left under a second name

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, pinned, footer: dict) -> None:
        """Copy `pinned` (a store view at footer["data_index"]) and append `footer` with the copy's length."""
        self.ready_index = self.ready_last = None
        self.failed = False

        def run():
            try:
                with open(self.partial, "wb", opener=private_opener) as f:
                    pinned.write_to(f)
                    f.flush()
                    snapshot_footer.write_footer(f, {**footer, "data_len": f.tell()})
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(self.partial, self.ready)
                self.ready_last = tuple(footer["last"][1:])
                self.ready_index = footer["data_index"]
            except Exception:
                log.exception("snapshot copy failed")
                self.failed = True
            finally:
                pinned.close()

        self._thread = threading.Thread(target=run, name="raftbus-snapshot", daemon=True)
        self._thread.start()


class LimitedReader:
    """The first `length` bytes of `f` (a snapshot's store copy, before its footer)."""

    def __init__(self, f, length: int):
        self._f, self._left = f, length

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._f.read(n)
        self._left -= len(data)
        return data

    def readinto(self, buf) -> int:
        data = self.read(len(buf))
        buf[: len(data)] = data
        return len(data)


def journal_command(entry: bytes) -> bytes | None:
    """The command of a regular log entry, None for any other entry."""
    if not entry or entry[0] != REGULAR:
        return None
    return entry[1:]
