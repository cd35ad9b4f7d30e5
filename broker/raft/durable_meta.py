"""Term and vote writes made durable once per loop pass, before anything that pass sends.

Raft needs a replica's term and vote on disk before it answers a vote request or a message of a newer term
(journal.DurableMetaStorer). Made durable one file at a time (fsync of the file and of its directory), thousands
of new groups electing at once would make the loop do thousands of fsyncs in a row, answer the votes after the
candidates' election timeouts, and keep the groups electing.

On the loop thread the storer writes the file (in place, `meta_slots`) and records it here instead; the loop calls
`sync_pending` just before it hands the pass's outgoing messages to the sockets (`RaftLoop.run_once`), and one
syncfs(2) of the file system makes every term and vote of the pass durable. Nothing of the pass reaches a peer
before that: the same guarantee as one fsync per write. If syncfs fails, each file and its directory are fsynced
one by one; if that fails too, the process exits rather than send a vote it could forget.
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading

log = logging.getLogger(__name__)

_state = threading.local()
_EXIT_CODE = 75


def _load_syncfs():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syncfs
    except (OSError, AttributeError):  # not Linux: per-file fsync
        return None


_syncfs = _load_syncfs()


class DeferredMetaSync:
    """The term/vote files written during one loop pass, made durable together by `sync_pending`."""

    def __init__(self):
        self.pending: set = set()  # meta_slots.SlotFile written this pass
        self.syncs = 0

    def activate(self) -> None:
        """Defer durable meta writes made on this thread from now on (until `deactivate`)."""
        _state.current = self

    @staticmethod
    def deactivate() -> None:
        _state.current = None

    def add(self, slots) -> None:
        self.pending.add(slots)

    def sync_pending(self) -> None:
        if not self.pending:
            return
        files, self.pending = self.pending, set()
        self.syncs += 1
        if _syncfs is not None and _syncfs_all(files):
            for slots in files:
                slots.synced()
            return
        try:
            for slots in files:
                slots.fsync()
                fsync_path(os.path.dirname(slots.path) or ".")
        except OSError as exc:
            log.critical("a Raft term or vote could not be made durable (%s); exiting before sending it", exc)
            os._exit(_EXIT_CODE)


def _syncfs_all(files) -> bool:
    """One syncfs per file system holding one of the slot files `files`, through a descriptor a file holds open
    (a pass opens no file, so a broker out of descriptors still makes its votes durable); False if any failed."""
    by_device: dict[int, tuple[int, str]] = {}
    for slots in files:
        fd = slots.fileno()
        if fd < 0:  # closed since its write (its journal was parked or closed): fsynced one by one
            return False
        by_device.setdefault(os.fstat(fd).st_dev, (fd, slots.path))
    for fd, path in by_device.values():
        if _syncfs(fd) != 0:
            log.error("syncfs of the file system of %s failed (errno %d); fsyncing %d term/vote files one by one",
                      path, ctypes.get_errno(), len(files))
            return False
    return True


def current() -> DeferredMetaSync | None:
    """The deferral active on this thread, if any."""
    return getattr(_state, "current", None)


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
