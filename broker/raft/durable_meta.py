"""Term and vote writes made durable once per loop pass, before anything that pass sends.

Raft needs a replica's term and vote on disk before it answers a vote request or a message of a newer term
(journal.DurableMetaStorer). Made durable one file after another, thousands of new groups electing at once would
make the loop wait for thousands of flushes in a row, answer the votes after the candidates' election timeouts,
and keep the groups electing.

On the loop thread the storer writes the file (in place, `meta_slots`) and records it here instead; the loop calls
`sync_pending` just before it hands the pass's outgoing messages to the sockets (`RaftLoop.run_once`), which
fdatasyncs the pass's files side by side on up to META_SYNC_THREADS threads (the block layer merges the flushes of
concurrent syncs), then the directories of files created in the pass. Nothing of the pass reaches a peer before
that: the same guarantee as one fsync per write. If a sync fails, the process exits rather than send a vote it
could forget. A replica deleted during the pass (moved off this broker) takes its writes out first (`forget_under`):
it will never vote again, so what it wrote need not last, and its files are gone by the time the pass syncs.

Only the files written are synced: a syncfs(2) of the whole file system would also write back every dirty page of
the broker's partitions and journals (hundreds of MB under load), which made an election's pass wait for seconds
and the groups of that broker elect again (docs/replication.md, Stall reports).
"""
from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

_state = threading.local()
_EXIT_CODE = 75
META_SYNC_THREADS = 8  # fdatasyncs of one pass's term/vote files run side by side on at most this many threads


class DeferredMetaSync:
    """The term/vote files written during one loop pass, made durable together by `sync_pending`."""

    def __init__(self):
        self.pending: set = set()  # meta_slots.SlotFile written this pass
        self.created_dirs: set[str] = set()  # directories of files created this pass: their entries need a sync
        self.syncs = 0
        self._pool: ThreadPoolExecutor | None = None

    def activate(self) -> None:
        """Defer durable meta writes made on this thread from now on (until `deactivate`)."""
        _state.current = self

    @staticmethod
    def deactivate() -> None:
        _state.current = None

    def add(self, slots, *, created: bool = False) -> None:
        self.pending.add(slots)
        if created:
            self.created_dirs.add(os.path.dirname(slots.path) or ".")

    def forget_under(self, directory: str) -> None:
        """Drop the pending writes of files in `directory` (a replica being deleted), and its created directories."""
        inside = directory.rstrip(os.sep) + os.sep
        self.pending = {slots for slots in self.pending if not slots.path.startswith(inside)}
        self.created_dirs = {d for d in self.created_dirs if d != directory and not d.startswith(inside)}

    def sync_pending(self) -> None:
        if not self.pending:
            return
        files, self.pending = list(self.pending), set()
        dirs, self.created_dirs = list(self.created_dirs), set()
        self.syncs += 1
        try:
            self._each(_sync_data, files)
            self._each(fsync_path, dirs)
        except OSError as exc:
            log.critical("a Raft term or vote could not be made durable (%s); exiting before sending it", exc)
            os._exit(_EXIT_CODE)

    def _each(self, sync, items) -> None:
        """`sync` of every item, side by side when there are several (each releases the GIL while it waits)."""
        if len(items) <= 1:
            for item in items:
                sync(item)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(META_SYNC_THREADS, thread_name_prefix="raftbus-meta-sync")
        for _ in self._pool.map(sync, items):  # re-raises the first failure
            pass

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _sync_data(slots) -> None:
    slots.sync_data()


def current() -> DeferredMetaSync | None:
    """The deferral active on this thread, if any."""
    return getattr(_state, "current", None)


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
