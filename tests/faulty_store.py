"""A Store wrapper that fails on demand, the way a disk does: a commit or an fsync raises, nothing is committed."""
from __future__ import annotations

from contextlib import contextmanager


class FaultyStore:
    """Delegates to `inner`; while `write_fault` is set every write transaction raises it at commit (the inner
    transaction is aborted), while `sync_fault` is set `sync()` raises it."""

    def __init__(self, inner):
        self.inner = inner
        self.write_fault: BaseException | None = None
        self.sync_fault: BaseException | None = None
        self.failed_writes = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @contextmanager
    def write(self):
        with self.inner.write() as txn:
            yield txn
            if self.write_fault is not None:
                self.failed_writes += 1
                raise self.write_fault

    def sync(self) -> None:
        if self.sync_fault is not None:
            raise self.sync_fault
        self.inner.sync()
