"""Goal: every state machine treats a store failure as a fault, never as an answer — apply raises with nothing
committed, the applied index stays put, and a typed refusal decided by the command is still an answer — and a
failed fsync crash-stops its group instead of being counted and forgotten."""
import errno

import pytest

from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.queues.state.machine import QueueStateMachine
from raftbus.broker.raft.group_commit import GroupCommit
from raftbus.broker.storage.base import StorageFailure, is_disk_full
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors
from tests.faulty_store import FaultyStore
from tests.unit.broker.metadata.test_metadata_state_machine import Metadata
from tests.unit.broker.queues.harness import QueueHarness

DISK_FULL = StorageFailure("mdb_txn_commit: No space left on device", disk_full=True)


def test_metadata_store_failure_raises_and_the_same_entry_applies_once_the_store_works():
    metadata = Metadata(FaultyStore(MemoryStore(MetadataStateMachine.TABLES)))
    metadata.register(1, 2, 3)
    applied = metadata.sm.applied_index()
    metadata.store.write_fault = DISK_FULL
    with pytest.raises(StorageFailure):
        metadata.create("orders")
    assert metadata.sm.applied_index() == applied and "orders" not in metadata.sm.topics()
    metadata.store.write_fault = None
    metadata.index -= 1  # the same committed entry, applied again
    assert not isinstance(metadata.create("orders"), errors.RaftbusError)
    assert "orders" in metadata.sm.topics() and metadata.sm.applied_index() == applied + 1


def test_metadata_refusal_is_still_an_answer():
    metadata = Metadata(FaultyStore(MemoryStore(MetadataStateMachine.TABLES)))
    metadata.register(1, 2, 3)
    metadata.create("orders")
    assert isinstance(metadata.create("orders"), errors.TopicExists)


def test_queue_store_failure_raises_and_applies_nothing():
    queue = QueueHarness(FaultyStore(MemoryStore(QueueStateMachine.TABLES)))
    queue.put(b"a")
    applied = queue.sm.applied_index()
    queue.store.write_fault = OSError(errno.EIO, "Input/output error")
    with pytest.raises(OSError):
        queue.put(b"b")
    assert queue.sm.applied_index() == applied and queue.sm.counts()[0] == 1
    queue.store.write_fault = None
    queue.index -= 1
    queue.put(b"b")
    assert queue.sm.counts()[0] == 2


def test_queue_refusal_is_still_an_answer_that_records_the_index():
    queue = QueueHarness(FaultyStore(MemoryStore(QueueStateMachine.TABLES)))
    result = queue.apply(b"\xffnot a queue command")
    assert isinstance(result, errors.RaftbusError)
    assert queue.sm.applied_index() == queue.index


def test_disk_full_is_told_apart_from_other_io_errors():
    assert is_disk_full(DISK_FULL) and is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert not is_disk_full(OSError(errno.EIO, "Input/output error"))
    assert not is_disk_full(StorageFailure("MDB_CORRUPTED"))


class SyncingGroup:
    def __init__(self, group_id, fault=None):
        self.group_id, self.fault = group_id, fault
        self.synced = 0
        self.stopped = None

    def sync(self):
        if self.fault is not None:
            raise self.fault
        self.synced += 1

    def stop(self, reason, disk_full=False):
        self.stopped = reason
        self.stopped_disk_full = disk_full


def test_a_failed_fsync_stops_its_group_and_only_that_group():
    commit = GroupCommit(200)
    bad, good = SyncingGroup("p1.0", OSError(errno.EIO, "Input/output error")), SyncingGroup("p1.1")
    commit.mark(bad)
    commit.mark(good)
    commit.run_once()
    assert bad.stopped is not None and "fsync failed" in bad.stopped and not bad.stopped_disk_full
    assert good.stopped is None and good.synced == 1
    assert commit.failures == 1


def test_an_fsync_that_finds_no_space_stops_its_group_as_a_full_disk_does():
    """Goal: ENOSPC from a sync is the full-disk state (reopened from the journal once there is room), not a stop
    that lasts until the broker restarts."""
    commit = GroupCommit(200)
    full = SyncingGroup("p1.0", OSError(errno.ENOSPC, "No space left on device"))
    commit.mark(full)
    commit.run_once()
    assert "fsync failed" in full.stopped and full.stopped_disk_full
