"""The production Store: one LMDB environment per replica, one named database per table."""
from __future__ import annotations

import errno
import os
import shutil
import threading
from pathlib import Path

import lmdb

from raftbus.client import errors

from raftbus.broker.storage.base import StorageFailure
from raftbus.broker.storage.open_files import OpenBudget, next_use
from raftbus.broker.storage.private import DIR_MODE, FILE_MODE, private_dir, private_opener

READERS_MAX = 512
MAP_USED_FRACTION_MAX = 0.75
RESTORE_CHUNK_BYTES = 1 << 20


class _SharedLock:
    """A readers-writer lock that prefers the exclusive side; shared holds may be released on any thread."""

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._shared = 0
        self._exclusive = False
        self._exclusive_waiting = 0

    def acquire_shared(self) -> None:
        with self._cond:
            while self._exclusive or self._exclusive_waiting:
                self._cond.wait()
            self._shared += 1

    def release_shared(self) -> None:
        with self._cond:
            self._shared -= 1
            if self._shared == 0:
                self._cond.notify_all()

    def acquire_exclusive(self) -> None:
        with self._cond:
            self._exclusive_waiting += 1
            try:
                while self._exclusive or self._shared:
                    self._cond.wait()
            finally:
                self._exclusive_waiting -= 1
            self._exclusive = True

    def try_acquire_exclusive(self) -> bool:
        """Take the exclusive side only if nobody holds either side now (never waits)."""
        with self._cond:
            if self._exclusive or self._shared:
                return False
            self._exclusive = True
            return True

    def release_exclusive(self) -> None:
        with self._cond:
            self._exclusive = False
            self._cond.notify_all()


_NO_SPACE = os.strerror(errno.ENOSPC)


def _typed(exc: lmdb.Error) -> Exception:
    """A typed answer for what the request decided (a value too large, too many readers); a StorageFailure for
    what the disk or the file did, which is never an answer (see broker/storage/base.py)."""
    if isinstance(exc, lmdb.BadValsizeError):
        return errors.InvalidArgument(f"key or value size not storable: {exc}")
    if isinstance(exc, lmdb.ReadersFullError):
        return errors.Overloaded(f"too many concurrent readers (max {READERS_MAX})")
    return StorageFailure(f"storage failure: {type(exc).__name__}: {exc}", disk_full=_NO_SPACE in str(exc))


class _LmdbReadTxn:
    """Reads through one LMDB transaction; values come back as bytes."""

    def __init__(self, dbs: dict, txn: lmdb.Transaction):
        self._dbs = dbs
        self._txn = txn

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._txn.get(key, None, self._dbs[table])

    def get_many(self, table: str, keys) -> list[bytes | None]:
        """Through one cursor: LMDB searches from its position first, so keys near each other (a batch of
        neighbours, in order) skip the descent from the root."""
        get = self._txn.cursor(db=self._dbs[table]).get
        return [get(key) for key in keys]

    def items(self, table: str, start: bytes | None = None, *, reverse: bool = False):
        cursor = self._txn.cursor(db=self._dbs[table])
        if reverse:
            return _iter_down(cursor, start)
        positioned = cursor.first() if start is None else cursor.set_range(start)
        return cursor.iternext() if positioned else iter(())

    def first(self, table: str) -> tuple[bytes, bytes] | None:
        cursor = self._txn.cursor(db=self._dbs[table])
        return cursor.item() if cursor.first() else None

    def last(self, table: str) -> tuple[bytes, bytes] | None:
        cursor = self._txn.cursor(db=self._dbs[table])
        return cursor.item() if cursor.last() else None

    def floor(self, table: str, key: bytes) -> tuple[bytes, bytes] | None:
        cursor = self._txn.cursor(db=self._dbs[table])
        if not _position_at_floor(cursor, key):
            return None
        return cursor.item()

    def count(self, table: str) -> int:
        return self._txn.stat(self._dbs[table])["entries"]


class _EmptyRead:
    """Reads of an absent store (created at its first write): every table is empty."""

    def get(self, table: str, key: bytes) -> None:
        return None

    def get_many(self, table: str, keys) -> list[None]:
        return [None for _ in keys]

    def items(self, table: str, start: bytes | None = None, *, reverse: bool = False):
        return iter(())

    def first(self, table: str) -> None:
        return None

    def last(self, table: str) -> None:
        return None

    def floor(self, table: str, key: bytes) -> None:
        return None

    def count(self, table: str) -> int:
        return 0


_EMPTY_READ = _EmptyRead()


def _position_at_floor(cursor: lmdb.Cursor, key: bytes) -> bool:
    """Place the cursor on the greatest key <= key; False when there is none."""
    if not cursor.set_range(key):
        return cursor.last()
    if cursor.key() == key:
        return True
    return cursor.prev()


def _iter_down(cursor: lmdb.Cursor, start: bytes | None):
    positioned = cursor.last() if start is None else _position_at_floor(cursor, start)
    return cursor.iterprev() if positioned else iter(())


# The write operations a transaction logs (to replay them after a map growth): (op, db, argument, value).
_PUT, _DELETE, _PUT_MANY, _DELETE_MANY, _POP_MANY, _DELETE_FIRST, _PUT_NEW_MANY = range(7)


def _run(txn: lmdb.Transaction, op: int, db, argument, value):
    if op == _PUT:
        return txn.put(argument, value, True, True, False, db)
    if op == _DELETE:
        return txn.delete(argument, b"", db)
    if op == _PUT_MANY:
        return txn.cursor(db).putmulti(argument)
    if op == _PUT_NEW_MANY:
        _, added = txn.cursor(db).putmulti(argument, overwrite=False)
        if added != len(argument):
            raise StorageFailure(f"{len(argument) - added} of {len(argument)} keys expected to be new were already "
                                 "held (or repeated): the store is not what the log says")
        return added
    cursor = txn.cursor(db)  # the batch ops go through one cursor (see get_many)
    if op == _DELETE_FIRST:
        return _delete_first(cursor, argument)
    if op == _POP_MANY:
        pop = cursor.pop
        return [pop(key) for key in argument]
    found, delete = cursor.set_key, cursor.delete
    return sum([found(key) and delete() for key in argument])


def _delete_first(cursor: lmdb.Cursor, count: int) -> int:
    """Delete from the first key on: each delete leaves the cursor on the next key, so nothing is searched."""
    if not cursor.first():
        return 0
    delete = cursor.delete
    for deleted in range(count):
        if not delete():
            return deleted
    return count


class _LmdbWriteTxn(_LmdbReadTxn):
    """Writes through one LMDB write transaction; operations are logged so a map growth can replay them.

    A growth replaces the underlying transaction, so finish an `items()` iteration before mutating.
    """

    def __init__(self, store: "LmdbStore", txn: lmdb.Transaction):
        super().__init__(store._dbs, txn)
        self._store = store
        self._log: list[tuple] = []

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._do(_PUT, self._dbs[table], key, value)

    def delete(self, table: str, key: bytes) -> bool:
        return self._do(_DELETE, self._dbs[table], key, None)

    def put_many(self, table: str, pairs) -> None:
        pairs = list(pairs)
        if pairs:
            self._do(_PUT_MANY, self._dbs[table], pairs, None)

    def put_new_many(self, table: str, pairs) -> None:
        pairs = list(pairs)
        if pairs:
            self._do(_PUT_NEW_MANY, self._dbs[table], pairs, None)

    def delete_many(self, table: str, keys) -> int:
        keys = list(keys)
        return self._do(_DELETE_MANY, self._dbs[table], keys, None) if keys else 0

    def pop_many(self, table: str, keys) -> list[bytes | None]:
        keys = list(keys)
        return self._do(_POP_MANY, self._dbs[table], keys, None) if keys else []

    def delete_first(self, table: str, count: int) -> int:
        return self._do(_DELETE_FIRST, self._dbs[table], count, None) if count > 0 else 0

    def _do(self, op: int, db, argument, value):
        entry = (op, db, argument, value)
        self._log.append(entry)
        try:
            return _run(self._txn, *entry)
        except lmdb.MapFullError:
            return self._grow_and_replay()
        except lmdb.Error as exc:
            self._log.pop()
            raise _typed(exc) from None

    def _grow_and_replay(self):
        """Abort, grow the map, and rebuild the same transaction from the log; the last operation's result."""
        self._txn.abort()
        while True:
            self._store._grow_inside_write()
            self._txn = self._store._env.begin(write=True)
            try:
                return self._replay()
            except lmdb.MapFullError:
                self._txn.abort()

    def _replay(self):
        result = None
        for entry in self._log:
            result = _run(self._txn, *entry)
        return result

    def commit(self) -> None:
        while True:
            try:
                self._txn.commit()
                return
            except lmdb.MapFullError:
                self._grow_and_replay()
            except lmdb.Error as exc:
                raise _typed(exc) from None

    def abort(self) -> None:
        self._txn.abort()


class _ReadScope:
    def __init__(self, store: "LmdbStore"):
        self._store = store

    def __enter__(self) -> _LmdbReadTxn | _EmptyRead:
        store = self._store
        self._txn = None
        if not store._acquire_shared(create=False):
            return _EMPTY_READ  # an absent store: nothing written yet, and reading creates nothing
        try:
            self._txn = store._env.begin(write=False)
        except lmdb.Error as exc:
            store._lock.release_shared()
            raise _typed(exc) from None
        return _LmdbReadTxn(store._dbs, self._txn)

    def __exit__(self, *exc_info) -> None:
        try:
            if self._txn is not None:
                self._txn.abort()
        finally:
            self._store._lock.release_shared()


class _WriteScope:
    def __init__(self, store: "LmdbStore"):
        self._store = store

    def __enter__(self) -> _LmdbWriteTxn:
        store = self._store
        store._writer.acquire()
        try:
            store._grow_if_nearly_full()
            store._acquire_shared()
        except BaseException:
            store._writer.release()
            raise
        try:
            self._txn = _LmdbWriteTxn(store, store._env.begin(write=True))
        except BaseException:
            store._lock.release_shared()
            store._writer.release()
            raise
        return self._txn

    def __exit__(self, exc_type, exc, tb) -> None:
        store = self._store
        try:
            if exc_type is None:
                self._txn.commit()
            else:
                self._txn.abort()
        finally:
            store._lock.release_shared()
            store._writer.release()


class _LmdbSnapshot:
    """A pinned read transaction; `write_to` copies it (compacted) as a complete data.mdb image."""

    def __init__(self, store: "LmdbStore", txn: lmdb.Transaction):
        self._store = store
        self._txn: lmdb.Transaction | None = txn

    def write_to(self, fileobj) -> None:
        if self._txn is None:
            raise errors.InternalError("snapshot already closed")
        fileobj.flush()
        fd = fileobj.fileno()
        self._store._env.copyfd(fd, compact=True, txn=self._txn)
        if fileobj.seekable():
            fileobj.seek(os.lseek(fd, 0, os.SEEK_CUR))

    def close(self) -> None:
        txn, self._txn = self._txn, None
        if txn is None:
            return
        try:
            txn.abort()
        finally:
            self._store._unpin()


class LmdbStore:
    """Tables of sorted byte keys in one LMDB environment (directory `path`).

    With a `budget` (broker/storage/open_files.py) the store may be parked while idle: its environment closed,
    opened again by the next read, write, snapshot or size query.
    """

    def __init__(self, path: str, tables: tuple[str, ...], map_size_bytes: int, budget: OpenBudget | None = None,
                 create_at_first_write: bool = False):
        self.path = str(path)
        self.tables = tuple(tables)
        self._map_size_bytes = max(int(map_size_bytes), 1 << 16)
        self._lock = _SharedLock()
        self._writer = threading.Lock()
        self._pin_lock = threading.Lock()
        self._pinned = 0
        self._closed = False
        self._budget = budget
        self.last_used = next_use()
        self._env: lmdb.Environment | None = None  # None while parked, absent (or after close)
        _finish_interrupted_restore(Path(self.path))
        # Absent: no file yet. Reads see empty tables; the first write, snapshot or restore creates the store.
        self._absent = create_at_first_write and not (Path(self.path) / "data.mdb").exists()
        if not self._absent:
            private_dir(self.path)  # once: a parked store reopens in place
            self._open()
            if budget is not None:
                budget.opened(self)

    @property
    def absent(self) -> bool:
        """True until the first write of a store made with `create_at_first_write` (no directory, no file)."""
        return self._absent

    # ------------------------------------------------------------------ environment
    def _open(self) -> None:
        if self._absent:  # created here, at its first write, snapshot or restore
            private_dir(self.path)
        # No writemap: with it LMDB writes through a shared map of a sparse file, and a full disk arrives as
        # SIGBUS (the whole broker dies); without it pages are written at commit and a full disk is an ENOSPC
        # the commit reports (StorageFailure). sync=False: the group commit fsyncs (see docs/storage.md).
        self._env = lmdb.open(self.path, map_size=self._map_size_bytes, max_dbs=len(self.tables),
                              max_readers=READERS_MAX, sync=False, metasync=False, readahead=False, mode=FILE_MODE)
        self._page_size = self._env.stat()["psize"]
        self._map_size_bytes = self._env.info()["map_size"]
        self._dbs = {table: self._env.open_db(table.encode()) for table in self.tables}
        self._absent = False

    def _acquire_shared(self, create: bool = True) -> bool:
        """Hold the shared lock on an open store (reopening a parked one, creating an absent one); with
        create=False an absent store stays absent and False comes back (the shared lock held all the same)."""
        while True:
            self._lock.acquire_shared()
            if self._closed:
                self._lock.release_shared()
                raise errors.Unavailable(f"store {self.path} is closed")
            if self._env is not None:
                self.last_used = next_use()
                return True
            if self._absent and not create:
                return False
            self._lock.release_shared()
            self._unpark()

    # ------------------------------------------------------------------ parking (open_files.py)
    @property
    def parked(self) -> bool:
        return self._env is None and not self._closed

    def park(self) -> bool:
        """Close the environment unless a reader, writer or snapshot holds it now (never waits); True once
        parked. Every committed page is in the file already (LMDB writes at commit) and is fsynced here, so `sync`
        of a parked store has nothing to do and opens no file (a write unparks it first)."""
        if not self._writer.acquire(blocking=False):
            return False
        try:
            if not self._lock.try_acquire_exclusive():
                return False
            try:
                if self._closed or self._pinned:
                    return False
                if self._env is not None:
                    self._env.sync(True)
                    self._env.close()
                    self._env = None
                    if self._budget is not None:
                        self._budget.parked(self)
                return True
            finally:
                self._lock.release_exclusive()
        finally:
            self._writer.release()

    def _unpark(self) -> None:
        self._lock.acquire_exclusive()
        try:
            if self._closed or self._env is not None:
                return
            created = self._absent
            try:
                self._open()
            except lmdb.Error as exc:
                raise _typed(exc) from None
            except OSError as exc:  # the directory of an absent store could not be made
                raise StorageFailure(f"cannot create store {self.path}: {exc}",
                                     disk_full=exc.errno == errno.ENOSPC) from None
        finally:
            self._lock.release_exclusive()
        if self._budget is not None:
            self._budget.opened(self, reopened=not created)

    def _used_bytes(self) -> int:
        return (self._env.info()["last_pgno"] + 1) * self._page_size

    def _grow_if_nearly_full(self) -> None:
        """Double the map before a write once it is more than 3/4 used (skipped while a snapshot is pinned)."""
        if self._closed or self._pinned or self._env is None:
            return  # a parked store is checked at its next write after this one (a full map grows in the write)
        if self._used_bytes() <= MAP_USED_FRACTION_MAX * self._map_size_bytes:
            return
        self._lock.acquire_exclusive()
        try:
            if not self._closed:
                self._set_map_size(self._map_size_bytes * 2)
        finally:
            self._lock.release_exclusive()

    def _grow_inside_write(self) -> None:
        """Called by the write transaction (holding the shared lock) after MapFullError and an abort."""
        self._lock.release_shared()
        self._lock.acquire_exclusive()
        try:
            self._set_map_size(self._map_size_bytes * 2)
        finally:
            self._lock.release_exclusive()
            self._lock.acquire_shared()

    def _set_map_size(self, map_size_bytes: int) -> None:
        try:
            self._env.set_mapsize(map_size_bytes)
        except lmdb.Error as exc:
            raise StorageFailure(f"cannot grow store {self.path} to {map_size_bytes} bytes: {exc}",
                                 disk_full=_NO_SPACE in str(exc)) from None
        self._map_size_bytes = self._env.info()["map_size"]

    @property
    def map_size_bytes(self) -> int:
        return self._map_size_bytes

    # ------------------------------------------------------------------ Store
    def read(self) -> _ReadScope:
        return _ReadScope(self)

    def write(self) -> _WriteScope:
        return _WriteScope(self)

    def size_bytes(self) -> int:
        if self._absent:
            return 0
        with self.read() as view:
            txn = view._txn
            pages = _pages(self._env.stat()) + sum(_pages(txn.stat(db)) for db in self._dbs.values())
        return pages * self._page_size

    def sync(self) -> None:
        self._lock.acquire_shared()
        try:
            if self._closed or self._absent:
                return
            if self._env is not None:
                self._env.sync(True)
        finally:
            self._lock.release_shared()

    def snapshot(self) -> _LmdbSnapshot:
        self._acquire_shared()
        try:
            txn = self._env.begin(write=False)
        except lmdb.Error as exc:
            self._lock.release_shared()
            raise _typed(exc) from None
        with self._pin_lock:
            self._pinned += 1
        return _LmdbSnapshot(self, txn)

    def _unpin(self) -> None:
        with self._pin_lock:
            self._pinned -= 1
        self._lock.release_shared()

    def restore(self, fileobj) -> None:
        staging = Path(self.path + ".restore")
        _write_image(fileobj, staging)
        _check_image(staging, self.tables)
        with self._writer:
            self._lock.acquire_exclusive()
            try:
                if self._closed:
                    raise errors.Unavailable(f"store {self.path} is closed")
                if self._env is not None:
                    self._env.sync(True)
                    self._env.close()
                    self._env = None
                _swap_in(Path(self.path), staging)
                self._absent = False
                image_bytes = (Path(self.path) / "data.mdb").stat().st_size
                self._map_size_bytes = max(self._map_size_bytes, 2 * image_bytes)
                self._open()
            finally:
                self._lock.release_exclusive()
        if self._budget is not None:
            self._budget.opened(self)

    def close(self) -> None:
        with self._writer:
            self._lock.acquire_exclusive()
            try:
                if not self._closed:
                    self._closed = True
                    if self._env is not None:
                        self._env.close()
                        self._env = None
            finally:
                self._lock.release_exclusive()
        if self._budget is not None:
            self._budget.closed(self)


def _pages(stat: dict) -> int:
    return stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]


def _fsync_path(path: Path) -> None:
    """fsync a file or a directory through its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_image(fileobj, staging: Path) -> None:
    """Copy fileobj from its position to EOF into staging/data.mdb, durably."""
    shutil.rmtree(staging, ignore_errors=True)
    private_dir(staging.parent)
    staging.mkdir(mode=DIR_MODE)
    with open(staging / "data.mdb", "wb", opener=private_opener) as out:
        while chunk := fileobj.read(RESTORE_CHUNK_BYTES):
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    _fsync_path(staging)


def _check_image(staging: Path, tables: tuple[str, ...]) -> None:
    """Open the staged image read-only and find every table, so a bad image never replaces good data."""
    try:
        env = lmdb.open(str(staging), readonly=True, lock=False, max_dbs=len(tables), create=False)
    except lmdb.Error as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise errors.InternalError(f"snapshot image is not an LMDB store: {exc}") from None
    try:
        with env.begin() as txn:
            for table in tables:
                env.open_db(table.encode(), txn=txn, create=False)
    except lmdb.Error as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise errors.InternalError(f"snapshot image lacks the store's tables: {exc}") from None
    finally:
        env.close()
    (staging / "lock.mdb").unlink(missing_ok=True)


def _swap_in(path: Path, staging: Path) -> None:
    """Replace directory `path` by `staging`: rename the old one away, rename the new one in, delete the old."""
    old = path.with_name(path.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():  # an absent store (created at its first write) has no directory yet
        os.rename(path, old)
    os.rename(staging, path)
    _fsync_path(path.parent)
    shutil.rmtree(old, ignore_errors=True)


def _finish_interrupted_restore(path: Path) -> None:
    """After a crash inside `_swap_in`, complete it; a staged image not yet swapped in is discarded."""
    staging = path.with_name(path.name + ".restore")
    old = path.with_name(path.name + ".old")
    if not path.exists() and old.exists():
        if staging.exists():
            os.rename(staging, path)
        else:
            os.rename(old, path)
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
