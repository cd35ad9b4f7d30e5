"""Goal: LmdbStore and MemoryStore keep the same Store contract (ordering, atomicity, isolation, snapshots)."""
import threading

import pytest

from raftbus.broker.storage.base import StorageFailure
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors

TABLES = ("a", "b")


def lmdb_store(path, map_size_bytes=1 << 20):
    return LmdbStore(str(path), TABLES, map_size_bytes)


class ParkingLmdbStore(LmdbStore):
    """An LmdbStore parked (its environment closed, broker/storage/open_files.py) before every read, write and
    snapshot that nothing else holds it for: the contract must hold across reopening."""

    def read(self):
        self.park()
        return super().read()

    def write(self):
        self.park()
        return super().write()

    def snapshot(self):
        self.park()
        return super().snapshot()


@pytest.fixture(params=["lmdb", "lmdb-parked", "lmdb-at-first-write", "memory"])
def make_store(request, tmp_path):
    """A factory of fresh stores of one implementation; each call gives an independent store."""
    opened = []
    counter = iter(range(1000))

    def make():
        if request.param == "memory":
            store = MemoryStore(TABLES)
        elif request.param == "lmdb-parked":
            store = ParkingLmdbStore(str(tmp_path / f"s{next(counter)}"), TABLES, 1 << 20)
        elif request.param == "lmdb-at-first-write":  # no file until its first write, snapshot or restore
            store = LmdbStore(str(tmp_path / f"s{next(counter)}"), TABLES, 1 << 20, create_at_first_write=True)
        else:
            store = lmdb_store(tmp_path / f"s{next(counter)}")
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(make_store):
    return make_store()


def fill(store, table="a", keys=(b"k1", b"k3", b"k5")):
    with store.write() as txn:
        for key in keys:
            txn.put(table, key, b"v" + key)


def test_put_get_delete(store):
    fill(store)
    with store.write() as txn:
        assert txn.get("a", b"k1") == b"vk1"
        assert txn.delete("a", b"k1") is True
        assert txn.delete("a", b"nope") is False
        assert txn.get("a", b"k1") is None
        txn.put("a", b"k3", memoryview(b"xxnew")[2:])
    with store.read() as txn:
        assert txn.get("a", b"k1") is None
        assert bytes(txn.get("a", b"k3")) == b"new"
        assert txn.get("b", b"k3") is None


def test_batch_get_put_delete(store):
    fill(store)
    with store.write() as txn:
        txn.put_many("a", [(b"k2", b"two"), (b"k1", memoryview(b"xone")[1:]), (b"k9", bytearray(b"nine"))])
        txn.put_many("b", [])
        assert txn.get_many("a", [b"k9", b"k0", b"k1"]) == [b"nine", None, b"one"]
        assert txn.delete_many("a", [b"k3", b"k0", b"k9"]) == 2
        assert txn.delete_many("b", []) == 0
    with store.read() as txn:
        assert [(bytes(k), bytes(v)) for k, v in txn.items("a")] == [(b"k1", b"one"), (b"k2", b"two"),
                                                                      (b"k5", b"vk5")]
        assert txn.get_many("a", [b"k3", b"k5"]) == [None, b"vk5"]


def test_delete_first_deletes_the_first_keys_in_order(store):
    fill(store, keys=(b"k5", b"k1", b"k3", b"k7"))
    with store.write() as txn:
        assert txn.delete_first("a", 2) == 2 and txn.delete_first("b", 3) == 0 and txn.delete_first("a", 0) == 0
        assert [bytes(k) for k, _ in txn.items("a")] == [b"k5", b"k7"]
        assert txn.delete_first("a", 5) == 2 and txn.count("a") == 0
    with store.read() as txn:
        assert txn.count("a") == 0


def test_pop_many_deletes_and_returns_each_value(store):
    fill(store)
    with store.write() as txn:
        assert txn.pop_many("a", [b"k5", b"k0", b"k1", b"k1"]) == [b"vk5", None, b"vk1", None]
        assert txn.pop_many("b", []) == []
        assert txn.get_many("a", [b"k1", b"k3", b"k5"]) == [None, b"vk3", None]
    with store.read() as txn:
        assert [bytes(k) for k, _ in txn.items("a")] == [b"k3"]


def test_put_new_many_writes_fresh_keys_and_refuses_a_held_or_repeated_one(store):
    fill(store)
    with store.write() as txn:
        txn.put_new_many("a", [(b"k2", b"two"), (memoryview(b"xk4")[1:], bytearray(b"four"))])
        txn.put_new_many("b", [])
    with store.read() as txn:
        assert [bytes(k) for k, _ in txn.items("a")] == [b"k1", b"k2", b"k3", b"k4", b"k5"]
        assert bytes(txn.get("a", b"k4")) == b"four"
    for pairs in ([(b"k6", b"six"), (b"k3", b"over")], [(b"k7", b"x"), (b"k7", b"y")]):
        with pytest.raises(StorageFailure):
            with store.write() as txn:
                txn.put("b", b"also", b"dropped")
                txn.put_new_many("a", pairs)
        with store.read() as txn:  # the whole transaction was dropped, the held value kept
            assert bytes(txn.get("a", b"k3")) == b"vk3"
            assert txn.get("a", b"k6") is None and txn.get("a", b"k7") is None and txn.get("b", b"also") is None


@pytest.mark.parametrize("start, reverse, expected", [
    (None, False, [b"k1", b"k3", b"k5"]),
    (b"k2", False, [b"k3", b"k5"]),
    (b"k3", False, [b"k3", b"k5"]),
    (b"k6", False, []),
    (None, True, [b"k5", b"k3", b"k1"]),
    (b"k4", True, [b"k3", b"k1"]),
    (b"k3", True, [b"k3", b"k1"]),
    (b"k0", True, []),
    (b"k9", True, [b"k5", b"k3", b"k1"]),
])
def test_items_from_a_start(store, start, reverse, expected):
    fill(store)
    with store.read() as txn:
        pairs = [(bytes(k), bytes(v)) for k, v in txn.items("a", start, reverse=reverse)]
    assert pairs == [(k, b"v" + k) for k in expected]


def test_first_last_floor_count(store):
    with store.read() as txn:
        assert (txn.first("a"), txn.last("a"), txn.floor("a", b"k"), txn.count("a")) == (None, None, None, 0)
    fill(store)
    with store.read() as txn:
        assert txn.first("a") == (b"k1", b"vk1")
        assert txn.last("a") == (b"k5", b"vk5")
        assert txn.floor("a", b"k4") == (b"k3", b"vk3")
        assert txn.floor("a", b"k3") == (b"k3", b"vk3")
        assert txn.floor("a", b"k9") == (b"k5", b"vk5")
        assert txn.floor("a", b"k0") is None
        assert txn.count("a") == 3 and txn.count("b") == 0


def test_write_aborts_when_the_block_raises(store):
    fill(store)
    with pytest.raises(RuntimeError):
        with store.write() as txn:
            txn.put("a", b"k9", b"x")
            txn.delete("a", b"k1")
            raise RuntimeError("boom")
    with store.read() as txn:
        assert txn.get("a", b"k9") is None and txn.get("a", b"k1") == b"vk1"


def test_read_sees_a_consistent_snapshot(store):
    fill(store)
    with store.read() as before:
        writer = threading.Thread(target=fill, args=(store, "a", (b"k2",)))
        writer.start()
        writer.join()
        assert before.get("a", b"k2") is None
        assert before.count("a") == 3
    with store.read() as after:
        assert after.get("a", b"k2") == b"vk2"


def test_snapshot_restores_into_another_store(make_store, tmp_path):
    source, target = make_store(), make_store()
    fill(source, "a")
    fill(source, "b", (b"x",))
    fill(target, "a", (b"old",))
    pinned = source.snapshot()
    fill(source, "a", (b"after",))
    image = tmp_path / "image"
    with open(image, "wb") as f:
        f.write(b"HEAD")
        copier = threading.Thread(target=pinned.write_to, args=(f,))
        copier.start()
        copier.join()
        pinned.close()
        f.write(b"TAIL")
    data = image.read_bytes()
    assert data.startswith(b"HEAD") and data.endswith(b"TAIL")
    with open(image, "rb") as f:
        f.seek(4)
        target.restore(_OnlyRead(f, len(data) - 8))
    with target.read() as txn:
        assert [k for k, _ in txn.items("a")] == [b"k1", b"k3", b"k5"]
        assert txn.get("b", b"x") == b"vx"
    fill(target, "a", (b"k9",))
    with target.read() as txn:
        assert txn.count("a") == 4


class _OnlyRead:
    """A reader of `length` bytes that offers nothing but read(n)."""

    def __init__(self, f, length):
        self._f, self._left = f, length

    def read(self, n=-1):
        n = self._left if n < 0 else min(n, self._left)
        data = self._f.read(n)
        self._left -= len(data)
        return data


def test_closed_store_refuses_reads(store):
    store.close()
    store.close()
    with pytest.raises(errors.Unavailable):
        with store.read():
            pass


def test_lmdb_map_grows_past_its_initial_size(tmp_path):
    store = lmdb_store(tmp_path / "s", map_size_bytes=64 * 1024)
    try:
        initial = store.map_size_bytes
        for round_ in range(20):
            with store.write() as txn:
                for i in range(50):
                    txn.put("a", b"%04d-%04d" % (round_, i), bytes(200))
        with store.write() as txn:
            txn.put("b", b"big", bytes(4 << 20))
        assert store.map_size_bytes > 4 << 20 > initial
        with store.read() as txn:
            assert txn.count("a") == 1000 and len(txn.get("b", b"big")) == 4 << 20
        assert store.size_bytes() >= 4 << 20
    finally:
        store.close()


def test_lmdb_growth_inside_a_write_replays_its_changes(tmp_path):
    store = lmdb_store(tmp_path / "s", map_size_bytes=64 * 1024)
    try:
        fill(store)
        with store.write() as txn:
            txn.delete("a", b"k1")
            for i in range(150):
                txn.put("b", b"%04d" % i, bytes(1000))
            txn.put_many("b", [(b"%04d" % i, bytes(1000)) for i in range(150, 300)])
            assert txn.delete_many("b", [b"0000", b"0299", b"nope"]) == 2
            assert txn.pop_many("b", [b"0001", b"nope"]) == [bytes(1000), None]
            assert txn.delete_first("b", 1) == 1  # b"0002", now the first
            for i in range(300, 400):  # grows the map again: the pops above are replayed
                txn.put("b", b"%04d" % i, bytes(1000))
            assert txn.get("a", b"k1") is None and txn.count("b") == 396
        with store.read() as txn:
            assert [k for k, _ in txn.items("a")] == [b"k3", b"k5"] and txn.count("b") == 396
            assert txn.get("b", b"0001") is None and txn.get("b", b"0002") is None
    finally:
        store.close()


def test_lmdb_close_and_reopen_keeps_committed_data(tmp_path):
    store = lmdb_store(tmp_path / "s")
    fill(store)
    store.sync()
    store.close()
    reopened = lmdb_store(tmp_path / "s")
    try:
        with reopened.read() as txn:
            assert [k for k, _ in txn.items("a")] == [b"k1", b"k3", b"k5"]
    finally:
        reopened.close()


def test_lmdb_restore_refuses_an_image_that_is_not_a_store(tmp_path):
    store = lmdb_store(tmp_path / "s")
    try:
        fill(store)
        with open(tmp_path / "junk", "wb") as f:
            f.write(b"not lmdb" * 1000)
        with open(tmp_path / "junk", "rb") as f, pytest.raises(errors.InternalError):
            store.restore(f)
        with store.read() as txn:
            assert txn.count("a") == 3
    finally:
        store.close()


def test_lmdb_readers_wait_out_a_growth(tmp_path):
    store = lmdb_store(tmp_path / "s", map_size_bytes=64 * 1024)
    failures = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            try:
                with store.read() as txn:
                    list(txn.items("a"))
            except Exception as exc:  # collected and asserted below
                failures.append(exc)
                return

    readers = [threading.Thread(target=reader) for _ in range(4)]
    for thread in readers:
        thread.start()
    try:
        for round_ in range(30):
            with store.write() as txn:
                txn.put("a", b"%04d" % round_, bytes(8000))
    finally:
        stop.set()
        for thread in readers:
            thread.join()
        store.close()
    assert failures == []
