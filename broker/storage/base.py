"""The storage seam: what a state machine may do to its durable state.

A `Store` holds named tables of sorted byte keys to byte values. State machines touch storage only
through one write transaction per applied command (`store.write()`) and readers use read transactions
(`store.read()`), which see a consistent snapshot. Two implementations pass the same contract tests:
`LmdbStore` (production, one LMDB environment per partition replica) and `MemoryStore` (tests).
"""
from __future__ import annotations

import errno
from contextlib import AbstractContextManager
from typing import Iterator, Protocol


class ReadTxn(Protocol):
    def get(self, table: str, key: bytes) -> bytes | None: ...

    def items(self, table: str, start: bytes | None = None, *, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """Pairs in key order from the first key >= start (reverse: from the last key <= start, going down)."""

    def first(self, table: str) -> tuple[bytes, bytes] | None: ...

    def last(self, table: str) -> tuple[bytes, bytes] | None: ...

    def floor(self, table: str, key: bytes) -> tuple[bytes, bytes] | None:
        """The pair with the greatest key <= key."""

    def count(self, table: str) -> int: ...

    def get_many(self, table: str, keys) -> list[bytes | None]:
        """The value of each key (None when absent), in the order of `keys`."""


class WriteTxn(ReadTxn, Protocol):
    def put(self, table: str, key: bytes, value: bytes) -> None: ...

    def delete(self, table: str, key: bytes) -> bool: ...

    def put_many(self, table: str, pairs) -> None:
        """put() of each (key, value) pair, in order (one call for a batch: the hot paths write hundreds)."""

    def put_new_many(self, table: str, pairs) -> None:
        """put_many() of pairs whose keys the table does not hold (new message rows under fresh sequence numbers):
        nothing is read first. A key already held, or twice in `pairs`, raises StorageFailure: the state machine
        expected a fresh key, so the store is not what the log says and the replica stops rather than overwrite."""

    def delete_many(self, table: str, keys) -> int:
        """delete() of each key; how many were there."""

    def delete_first(self, table: str, count: int) -> int:
        """Delete the first `count` keys in key order (all of them when there are fewer); how many there were."""

    def pop_many(self, table: str, keys) -> list[bytes | None]:
        """delete() of each key, in order; the value each had (None when absent). A key named twice is
        found the first time only."""


class StoreSnapshot(Protocol):
    def write_to(self, fileobj) -> None:
        """Write the pinned view to a binary file object; may run on another thread."""

    def close(self) -> None:
        """Release the pinned view."""


class Store(Protocol):
    tables: tuple[str, ...]

    def read(self) -> AbstractContextManager[ReadTxn]: ...

    def write(self) -> AbstractContextManager[WriteTxn]:
        """Commits when the block ends normally, aborts if it raises."""

    def size_bytes(self) -> int: ...

    def sync(self) -> None:
        """Make every committed write durable (the group commit)."""

    def snapshot(self) -> "StoreSnapshot":
        """Pin a consistent view of the store as it is now (cheap; call on the thread that applies)."""

    def restore(self, fileobj) -> None:
        """Replace the whole content with a copy written by `StoreSnapshot.write_to` (read from fileobj's
        current position to its end)."""

    def close(self) -> None: ...


class StorageFailure(Exception):
    """The store could not do what it was asked for a reason that is not the command's: a full disk, an I/O
    error, a map that cannot grow, a corrupt page. It is never an answer to a client: a replica that meets it
    while applying a committed entry stops applying (see RaftGroup), because the other replicas applied it."""

    def __init__(self, message: str, *, disk_full: bool = False):
        super().__init__(message)
        self.disk_full = disk_full


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` (a StorageFailure or an OSError) means the disk has no space left."""
    if isinstance(exc, StorageFailure):
        return exc.disk_full
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
