"""Goal: a partition store made with create_at_first_write holds no file until something is written to it, reads
of it see empty tables and create nothing, and once written it behaves (and reopens) as any LmdbStore."""
import pytest

from raftbus.broker.storage.base import StorageFailure
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.storage.open_files import OpenBudget

TABLES = ("a", "b")


def at_first_write(path, budget=None):
    return LmdbStore(str(path), TABLES, 1 << 20, budget=budget, create_at_first_write=True)


def test_reads_sizes_and_syncs_of_an_absent_store_create_nothing(tmp_path):
    store = at_first_write(tmp_path / "s")
    try:
        assert store.absent
        with store.read() as txn:
            assert txn.get("a", b"k") is None
            assert txn.get_many("a", [b"k", b"l"]) == [None, None]
            assert list(txn.items("a")) == [] and list(txn.items("b", b"x", reverse=True)) == []
            assert txn.first("a") is None and txn.last("a") is None and txn.floor("a", b"k") is None
            assert txn.count("a") == 0
        assert store.size_bytes() == 0
        store.sync()
        assert store.park() is True
        assert not (tmp_path / "s").exists()
        assert store.absent
    finally:
        store.close()


def test_the_first_write_creates_the_store_and_it_reopens_with_its_data(tmp_path):
    store = at_first_write(tmp_path / "s")
    with store.write() as txn:
        txn.put("a", b"k", b"v")
    assert not store.absent
    assert (tmp_path / "s" / "data.mdb").exists()
    assert store.size_bytes() > 0
    store.sync()
    store.close()
    again = at_first_write(tmp_path / "s")  # files on disk: opened at once, as before
    try:
        assert not again.absent
        with again.read() as txn:
            assert txn.get("a", b"k") == b"v"
    finally:
        again.close()


def test_an_aborted_first_write_still_leaves_an_empty_store(tmp_path):
    store = at_first_write(tmp_path / "s")
    try:
        with pytest.raises(RuntimeError):
            with store.write() as txn:
                txn.put("a", b"k", b"v")
                raise RuntimeError("abort")
        with store.read() as txn:
            assert txn.get("a", b"k") is None
    finally:
        store.close()


def test_a_directory_without_a_data_file_counts_as_absent(tmp_path):
    (tmp_path / "s").mkdir()  # e.g. a crash between making the directory and the first commit
    store = at_first_write(tmp_path / "s")
    try:
        assert store.absent
        with store.write() as txn:
            txn.put("b", b"k", b"v")
        with store.read() as txn:
            assert txn.get("b", b"k") == b"v"
    finally:
        store.close()


def test_snapshot_and_restore_of_absent_stores(tmp_path):
    source = at_first_write(tmp_path / "src")
    target = at_first_write(tmp_path / "dst")
    try:
        snapshot = source.snapshot()  # an image of empty tables, so a follower can be installed from it
        try:
            with open(tmp_path / "image", "wb") as image:
                snapshot.write_to(image)
        finally:
            snapshot.close()
        assert not source.absent
        with open(tmp_path / "image", "rb") as image:
            target.restore(image)
        assert not target.absent
        with target.read() as txn:
            assert txn.count("a") == 0
        with target.write() as txn:
            txn.put("a", b"k", b"v")
        with target.read() as txn:
            assert txn.get("a", b"k") == b"v"
    finally:
        source.close()
        target.close()


def test_absent_stores_hold_no_place_in_the_open_files_bound(tmp_path):
    budget = OpenBudget(2, "stores")
    stores = [at_first_write(tmp_path / f"s{i}", budget) for i in range(5)]
    try:
        assert budget.open_count == 0
        for store in stores[:3]:
            with store.write() as txn:
                txn.put("a", b"k", b"v")
        assert budget.open_count <= 2
        assert budget.reopened_total == 0  # a creation is not a reopening
        with stores[0].read() as txn:  # parked once the bound was passed, reopened here
            assert txn.get("a", b"k") == b"v"
        assert all(store.absent for store in stores[3:])
    finally:
        for store in stores:
            store.close()


def test_a_store_that_cannot_be_created_is_a_storage_failure(tmp_path):
    (tmp_path / "file").write_bytes(b"")  # a file where the store's parent directory should be
    store = at_first_write(tmp_path / "file" / "s")
    try:
        with pytest.raises(StorageFailure):
            with store.write() as txn:
                txn.put("a", b"k", b"v")
        assert store.absent
    finally:
        store.close()
