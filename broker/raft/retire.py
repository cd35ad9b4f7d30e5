"""Replacing a large file without freeing its blocks on the Raft loop.

A file system mounted with `discard` (ext4 on this project's VMs) frees the blocks of a file whose last link goes
with a synchronous discard of each extent, in the call that drops the link: an `os.replace` over a snapshot of
hundreds of MB held the loop thread for hundreds of milliseconds under load. `replace` keeps the old file alive under
a second name (`<name>.retired.<pid>.<n>`, one more link) while the new one is renamed into place, and a thread of
its own (`FileRetirer`) removes that name afterwards. A crash in between leaves the retired name, which
`remove_retired` hands to the thread when the group opens again.
"""
from __future__ import annotations

import glob
import itertools
import logging
import os
import queue
import threading

log = logging.getLogger(__name__)

RETIRED_SUFFIX = ".retired."
_names = itertools.count()


class FileRetirer:
    """Removes files on a daemon thread, in the order handed over (started at the first)."""

    def __init__(self):
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()

    def remove(self, path: str) -> None:
        with self._lock:
            self._idle.clear()
            self._queue.put(path)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="raftbus-file-retirer", daemon=True)
                self._thread.start()

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Whether every file handed over so far is removed (tests)."""
        return self._idle.wait(timeout_s)

    def _run(self) -> None:
        while True:
            path = self._queue.get()
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("removing the retired file %s failed: %s", path, exc)
            with self._lock:
                if self._queue.empty():
                    self._idle.set()


RETIRER = FileRetirer()


def replace(src: str, dst: str) -> None:
    """`os.replace(src, dst)`, the old `dst` (if any) removed later by RETIRER, not by this call."""
    retired = f"{dst}{RETIRED_SUFFIX}{os.getpid()}.{next(_names)}"
    try:
        os.link(dst, retired)
    except FileNotFoundError:
        retired = None
    except OSError as exc:  # no hard links here, or the name is taken: the old file goes with the rename
        log.debug("keeping %s for removal off the loop failed: %s", dst, exc)
        retired = None
    os.replace(src, dst)
    if retired is not None:
        RETIRER.remove(retired)


def remove_retired(dst: str) -> None:
    """Hand the retired names of `dst` a crash left behind to RETIRER."""
    for path in glob.glob(glob.escape(dst) + RETIRED_SUFFIX + "*"):
        RETIRER.remove(path)
