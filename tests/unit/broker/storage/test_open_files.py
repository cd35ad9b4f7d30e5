"""Goal: a broker keeps at most `storage_replicas_open_max` partition stores and journals open; idle ones past the
bound are parked (their files closed) and open again on their next use, with every byte and answer unchanged, and
a member in use is never parked."""
import builtins
import errno
import os
import resource
import threading
from types import SimpleNamespace

import pytest

from raftbus.broker.raft import durable_meta, meta_slots
from raftbus.broker.raft.group import RaftGroup
from raftbus.broker.raft.journal import AppendJournal, read_synced_index
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.settings import BrokerSettings
from raftbus.broker.storage.open_files import OpenBudget, derived_limit, plan_descriptors, raise_descriptor_limit
from raftbus.client import errors

TABLES = ("a",)


def open_fds_under(path) -> int:
    """File descriptors of this process open on files under `path`."""
    prefix = str(path)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(prefix):
                count += 1
        except OSError:
            pass
    return count


def make_stores(tmp_path, budget, count):
    stores = [LmdbStore(str(tmp_path / f"s{i}"), TABLES, 1 << 20, budget=budget) for i in range(count)]
    for i, store in enumerate(stores):
        with store.write() as txn:
            txn.put("a", b"key", f"value-{i}".encode())
    return stores


def value(store) -> bytes:
    with store.read() as txn:
        return bytes(txn.get("a", b"key"))


def test_past_the_bound_the_least_recently_used_stores_are_parked_and_reopen_on_use(tmp_path):
    budget = OpenBudget(3, "stores")
    stores = make_stores(tmp_path, budget, 6)
    assert budget.open_count <= 3
    assert [s.parked for s in stores[:3]] == [True, True, True]  # the oldest went first
    assert open_fds_under(tmp_path) <= 3 * 3
    assert [value(s) for s in stores] == [f"value-{i}".encode() for i in range(6)]
    assert budget.reopened_total >= 3 and budget.open_count <= 3
    with stores[0].write() as txn:  # a parked store takes writes too
        txn.put("a", b"more", b"x")
    assert value(stores[0]) == b"value-0"
    for store in stores:
        store.close()
    assert budget.open_count == 0 and open_fds_under(tmp_path) == 0


def test_a_store_being_read_written_or_snapshotted_is_not_parked(tmp_path):
    budget = OpenBudget(10, "stores")
    reading, writing, pinned = make_stores(tmp_path, budget, 3)
    with reading.read() as txn:
        assert reading.park() is False
        assert bytes(txn.get("a", b"key")) == b"value-0"
    with writing.write() as txn:
        assert writing.park() is False
        txn.put("a", b"key", b"changed")
    snapshot = pinned.snapshot()
    assert pinned.park() is False
    snapshot.close()
    assert [reading.park(), writing.park(), pinned.park()] == [True, True, True]
    assert budget.open_count == 0 and budget.parked_total == 3
    assert value(writing) == b"changed"


def test_parking_skips_members_in_use_and_parks_the_next_least_recently_used(tmp_path):
    budget = OpenBudget(2, "stores")
    first, second = make_stores(tmp_path, budget, 2)
    with first.read():
        LmdbStore(str(tmp_path / "third"), TABLES, 1 << 20, budget=budget)
        assert not first.parked and second.parked


def test_a_parked_store_syncs_closes_and_restores(tmp_path):
    budget = OpenBudget(5, "stores")
    store, source = make_stores(tmp_path, budget, 2)
    assert store.park()
    store.sync()  # fsync through the path; does not reopen
    assert store.parked
    image = tmp_path / "image"
    with open(image, "wb") as f:
        snapshot = source.snapshot()
        snapshot.write_to(f)
        snapshot.close()
    with open(image, "rb") as f:
        store.restore(f)
    assert value(store) == b"value-1" and not store.parked
    assert store.park()
    store.close()
    with pytest.raises(errors.Unavailable):
        value(store)
    assert store.park() is False


def test_stores_shared_by_threads_under_a_tiny_bound_keep_every_write(tmp_path):
    budget = OpenBudget(2, "stores")
    stores = make_stores(tmp_path, budget, 8)
    failures = []

    def work(worker: int):
        try:
            for round_ in range(40):
                store = stores[(worker * 3 + round_) % len(stores)]
                with store.write() as txn:
                    txn.put("a", f"w{worker}-{round_}".encode(), b"x")
                value(store)
        except Exception as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    for worker in range(4):
        for round_ in range(40):
            store = stores[(worker * 3 + round_) % len(stores)]
            with store.read() as txn:
                assert txn.get("a", f"w{worker}-{round_}".encode()) == b"x"
    assert budget.parked_total > 0 and budget.reopened_total > 0
    assert open_fds_under(tmp_path) <= 3 * 2 + 3 * 4  # the bound, plus members that were busy at a sweep


def test_journals_park_and_reopen_with_every_entry_kept(tmp_path):
    budget = OpenBudget(1, "journals")
    journals = [AppendJournal(str(tmp_path / f"j{i}.journal")) for i in range(3)]
    for journal in journals:
        journal.attach_budget(budget)
    assert budget.open_count == 1 and [j.parked for j in journals] == [True, True, False]
    for n, journal in enumerate(journals):
        for idx in range(1, 4):
            journal.add(f"c{n}-{idx}".encode(), idx, 1)
    assert budget.open_count == 1 and budget.reopened_total >= 2
    journals[0].delete_from(2)        # truncation of a parked journal reopens it
    journals[1].park()
    journals[1].delete_to(1)          # compaction of a parked journal: from memory; its file waits for a write
    assert journals[1].parked and journals[1].rewrite_compacted() is False
    journals[2].park()
    journals[2].flush()
    for journal in journals:
        journal.park()
        journal.close()                   # a parked journal is fsynced and closed on stop
        assert journal.park() is False
    assert open_fds_under(tmp_path) == 0 and budget.open_count == 0
    kept = [[e[:2] for e in AppendJournal(str(tmp_path / f"j{i}.journal"))._entries] for i in range(3)]
    assert kept == [[(b"c0-1", 1), (b"c0-2", 2)], [(b"c1-1", 1), (b"c1-2", 2), (b"c1-3", 3)],
                    [(b"c2-1", 1), (b"c2-2", 2), (b"c2-3", 3)]]


def test_a_journal_being_written_is_not_parked(tmp_path):
    journal = AppendJournal(str(tmp_path / "j.journal"))
    journal.attach_budget(OpenBudget(4, "journals"))
    with journal._fd_lock:
        assert journal.park() is False
    assert journal.park() is True
    journal.close()


def test_the_bound_comes_from_the_setting_or_the_descriptor_limit():
    assert derived_limit(250, 1024) == 250
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft > 64:
        assert derived_limit(0, 32) == (soft - 32) // 6
        with pytest.raises(errors.InvalidArgument):
            derived_limit(0, soft)
    with pytest.raises(errors.InvalidArgument):
        OpenBudget(0, "stores")


@pytest.mark.parametrize("overrides", [{"storage_replicas_open_max": -1}, {"storage_fds_reserved": -1},
                                       {"gc_freeze_interval_ms": -1}, {"gc_drops_collect_fraction": 0.0},
                                       {"gc_drops_collect_fraction": 1.5}, {"malloc_mmap_threshold_bytes": -1},
                                       {"malloc_trim_threshold_bytes": -1}])
def test_bad_open_file_and_heap_settings_are_refused(overrides):
    from raftbus.broker.settings import load_settings

    with pytest.raises(errors.InvalidArgument):
        load_settings(**overrides)


def test_the_group_commit_opens_no_file(tmp_path, monkeypatch):
    """A group commit (RaftGroup.sync) of open and parked stores and journals, and a new term and vote made durable
    at once or by the loop's deferred sync, succeed while every attempt to open a file fails with EMFILE, as it
    does when clients have taken the process's descriptors: they go through the descriptors held, and the
    journal's fsync mark and the term reach their files."""
    budget, journals_budget = OpenBudget(1, "stores"), OpenBudget(1, "journals")
    stores = make_stores(tmp_path, budget, 2)
    journals = [AppendJournal(str(tmp_path / f"j{i}.journal")) for i in range(2)]
    for n, journal in enumerate(journals):
        journal.attach_budget(journals_budget)
        for idx in range(1, 4):
            journal.add(f"c{n}-{idx}".encode(), idx, 1)
    assert [s.parked for s in stores] == [True, False] and [j.parked for j in journals] == [True, False]
    groups = [SimpleNamespace(stopped=None, store=store, raft=SimpleNamespace(log=journal), _clock=lambda: 0.0,
                              fsync_latency=SimpleNamespace(observe=lambda _s: None), data_dir=tmp_path)
              for store, journal in zip(stores, journals)]
    RaftGroup.sync(groups[1])  # the mark's file is opened once, at the first mark
    journals[1].set_term(1, None)
    journals[1].save_meta()  # and the term and vote file at the first write

    def out_of_descriptors(*_args, **_kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "open", out_of_descriptors)
    monkeypatch.setattr(builtins, "open", out_of_descriptors)
    journals[1].add(b"c1-4", 4, 1)
    for group in groups:
        RaftGroup.sync(group)
    journals[1].set_term(2, "2")
    journals[1].save_meta()
    deferred = durable_meta.DeferredMetaSync()
    deferred.activate()
    try:
        journals[1].set_term(3, "3")
        journals[1].save_meta()
        deferred.sync_pending()
    finally:
        deferred.deactivate()
    monkeypatch.undo()
    assert meta_slots.read_slots(journals[1]._path + ".meta")[0]["currentTerm"] == 3
    assert [read_synced_index(j._path) for j in journals] == [3, 4]  # the parked one was marked when parked
    for store, journal in zip(stores, journals):
        store.close()
        journal.close()


def test_client_connection_bounds_must_leave_the_reserved_descriptors():
    """The default connection bounds of the client ports (with and without the Kafka port) fit beside the replicas
    and storage_raft_fds_reserved; bounds that would eat into the reserve refuse the start, naming the settings."""
    defaults = BrokerSettings()
    grpc, kafka, storage = defaults.grpc, defaults.kafka, defaults.storage
    assert plan_descriptors(storage, grpc.grpc_connections_max) >= 1
    assert plan_descriptors(storage, grpc.grpc_connections_max + kafka.kafka_connections_max) >= 1
    with pytest.raises(errors.InvalidArgument, match="grpc_connections_max.*storage_raft_fds_reserved"):
        plan_descriptors(storage, storage.storage_fds_reserved - storage.storage_raft_fds_reserved + 1)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    fixed = storage.__class__(storage_replicas_open_max=100, storage_fds_reserved=storage.storage_fds_reserved)
    assert plan_descriptors(fixed, 1000) == 100
    with pytest.raises(errors.InvalidArgument, match="storage_replicas_open_max=100"):
        plan_descriptors(fixed, soft)


def test_the_descriptor_limit_is_raised_to_the_hard_limit():
    """At start the broker raises its RLIMIT_NOFILE soft limit to the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard < 512:
        pytest.skip("needs a finite hard limit of at least 512 descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        assert raise_descriptor_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
