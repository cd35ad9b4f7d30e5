"""The in-memory Store for tests: sorted tables, copy-on-write commits, marshal snapshots."""
from __future__ import annotations

import bisect
import marshal
import threading
from typing import Iterator

from raftbus.client import errors
from raftbus.broker.storage.base import StorageFailure


class _Table:
    """One table: a sorted key list plus a dict; never changed once published (writers copy it first)."""

    __slots__ = ("keys", "values")

    def __init__(self, keys: list[bytes] | None = None, values: dict[bytes, bytes] | None = None):
        self.keys = keys if keys is not None else []
        self.values = values if values is not None else {}

    def copy(self) -> "_Table":
        return _Table(list(self.keys), dict(self.values))


def _pairs(keys, values: dict[bytes, bytes]) -> Iterator[tuple[bytes, bytes]]:
    for key in keys:
        value = values.get(key)
        if value is not None:
            yield key, value


class _MemoryReadTxn:
    def __init__(self, tables: dict[str, _Table]):
        self._tables = tables

    def _table(self, table: str) -> _Table:
        try:
            return self._tables[table]
        except KeyError:
            raise errors.InternalError(f"no table {table!r} in this store") from None

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._table(table).values.get(bytes(key))

    def items(self, table: str, start: bytes | None = None, *, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        t = self._table(table)
        keys = t.keys
        if reverse:
            end = len(keys) if start is None else bisect.bisect_right(keys, bytes(start))
            return _pairs(reversed(keys[:end]), t.values)
        begin = 0 if start is None else bisect.bisect_left(keys, bytes(start))
        return _pairs(keys[begin:], t.values)

    def first(self, table: str) -> tuple[bytes, bytes] | None:
        t = self._table(table)
        return (t.keys[0], t.values[t.keys[0]]) if t.keys else None

    def last(self, table: str) -> tuple[bytes, bytes] | None:
        t = self._table(table)
        return (t.keys[-1], t.values[t.keys[-1]]) if t.keys else None

    def floor(self, table: str, key: bytes) -> tuple[bytes, bytes] | None:
        t = self._table(table)
        position = bisect.bisect_right(t.keys, bytes(key))
        if position == 0:
            return None
        found = t.keys[position - 1]
        return found, t.values[found]

    def count(self, table: str) -> int:
        return len(self._table(table).keys)

    def get_many(self, table: str, keys) -> list[bytes | None]:
        values = self._table(table).values
        return [values.get(bytes(key)) for key in keys]


class _MemoryWriteTxn(_MemoryReadTxn):
    """Changes a private copy of each table it touches; the store publishes the copies on commit."""

    def __init__(self, tables: dict[str, _Table]):
        super().__init__(dict(tables))
        self._copied: set[str] = set()

    def _writable(self, table: str) -> _Table:
        if table not in self._copied:
            self._tables[table] = self._table(table).copy()
            self._copied.add(table)
        return self._tables[table]

    def put(self, table: str, key: bytes, value: bytes) -> None:
        if not key:
            raise errors.InvalidArgument("keys must not be empty")
        t = self._writable(table)
        key = bytes(key)
        if key not in t.values:
            bisect.insort(t.keys, key)
        t.values[key] = bytes(value)

    def delete(self, table: str, key: bytes) -> bool:
        key = bytes(key)
        if key not in self._table(table).values:
            return False
        t = self._writable(table)
        del t.values[key]
        del t.keys[bisect.bisect_left(t.keys, key)]
        return True

    def put_many(self, table: str, pairs) -> None:
        for key, value in pairs:
            self.put(table, key, value)

    def put_new_many(self, table: str, pairs) -> None:
        pairs = [(bytes(key), value) for key, value in pairs]
        held = self._table(table).values
        keys = [key for key, _ in pairs]
        if len(set(keys)) != len(keys) or any(key in held for key in keys):
            raise StorageFailure(f"keys expected to be new in {table} were already held (or repeated)")
        self.put_many(table, pairs)

    def delete_many(self, table: str, keys) -> int:
        return sum(self.delete(table, key) for key in keys)

    def delete_first(self, table: str, count: int) -> int:
        return self.delete_many(table, self._table(table).keys[:max(count, 0)])

    def pop_many(self, table: str, keys) -> list[bytes | None]:
        popped = []
        for key in keys:
            popped.append(self.get(table, key))
            self.delete(table, key)
        return popped


class _Scope:
    def __init__(self, store: "MemoryStore", write: bool):
        self._store = store
        self._write = write

    def __enter__(self):
        store = self._store
        if self._write:
            store._writer.acquire()
        try:
            tables = store._committed()
        except BaseException:
            if self._write:
                store._writer.release()
            raise
        self._txn = _MemoryWriteTxn(tables) if self._write else _MemoryReadTxn(tables)
        return self._txn

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._write:
            return
        try:
            if exc_type is None:
                self._store._tables = self._txn._tables
        finally:
            self._store._writer.release()


class _MemorySnapshot:
    def __init__(self, tables: dict[str, _Table]):
        self._tables = tables

    def write_to(self, fileobj) -> None:
        fileobj.write(_dump(self._tables))

    def close(self) -> None:
        self._tables = {}


def _dump(tables: dict[str, _Table]) -> bytes:
    return marshal.dumps({name: t.values for name, t in tables.items()})


def _load(data: bytes, names: tuple[str, ...]) -> dict[str, _Table]:
    try:
        raw = marshal.loads(data)
        return {name: _Table(sorted(raw[name]), dict(raw[name])) for name in names}
    except (EOFError, ValueError, TypeError, KeyError) as exc:
        raise errors.InternalError(f"snapshot image is not a memory store: {exc!r}") from None


class MemoryStore:
    """Tables of sorted byte keys held in memory; read transactions see the state committed when they began."""

    def __init__(self, tables: tuple[str, ...]):
        self.tables = tuple(tables)
        self._tables = {name: _Table() for name in self.tables}
        self._writer = threading.RLock()
        self._closed = False

    def _committed(self) -> dict[str, _Table]:
        if self._closed:
            raise errors.Unavailable("store is closed")
        return self._tables

    def read(self) -> _Scope:
        return _Scope(self, write=False)

    def write(self) -> _Scope:
        return _Scope(self, write=True)

    def size_bytes(self) -> int:
        return sum(len(k) + len(v) for t in self._committed().values() for k, v in t.values.items())

    def sync(self) -> None:
        pass

    def snapshot(self) -> _MemorySnapshot:
        return _MemorySnapshot(self._committed())

    def restore(self, fileobj) -> None:
        chunks = []
        while chunk := fileobj.read(1 << 20):
            chunks.append(chunk)
        tables = _load(b"".join(chunks), self.tables)
        with self._writer:
            self._committed()
            self._tables = tables

    def close(self) -> None:
        self._closed = True
