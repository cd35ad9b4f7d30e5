"""Goal: a partition keeps a checksum of exactly the batches it stores (appends add, retention removes, in the
same transaction), a checkpoint records it at one log index on every replica, two replicas that applied the
same log agree, and a batch changed in the store behind the state machine is found."""
import pytest

from raftbus.broker import commands
from raftbus.broker.log import digest as checks
from raftbus.broker.log.state import BATCHES, PartitionStateMachine
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client.records import encode_batch


class Replica:
    def __init__(self, store):
        self.store = store
        self.sm = PartitionStateMachine(store)
        self.index = 0

    def apply(self, command):
        self.index += 1
        return self.sm.apply(self.index, command)

    def produce(self, value: bytes, now_ms: int = 1_000):
        blob, count, max_ts = encode_batch([(now_ms, None, value, ())])
        return self.apply(commands.encode_produce(now_ms, b"", 0, count, max_ts, blob))


@pytest.fixture(params=["memory", "lmdb"])
def make(request, tmp_path):
    stores = []

    def replica(name="r"):
        if request.param == "memory":
            store = MemoryStore(PartitionStateMachine.TABLES)
        else:
            store = LmdbStore(str(tmp_path / name), PartitionStateMachine.TABLES, 1 << 20)
        stores.append(store)
        return Replica(store)
    yield replica
    for store in stores:
        if hasattr(store, "close"):
            store.close()


def test_replicas_applying_the_same_log_record_equal_checkpoints(make):
    a, b = make("a"), make("b")
    for replica in (a, b):
        for i in range(5):
            replica.produce(f"v{i}".encode(), now_ms=100 * i)
        replica.apply(commands.encode_trim(250, 100, -1, -1))
    first, second = a.apply(commands.CHECKPOINT_COMMAND), b.apply(commands.CHECKPOINT_COMMAND)
    assert first == second == a.sm.checkpoint() == b.sm.checkpoint()
    assert (first.index, first.log_start_offset, first.high_watermark) == (7, 2, 5) and first.digest is not None
    assert a.sm.store_consistent() and b.sm.store_consistent()


def test_the_digest_describes_exactly_the_stored_batches(make):
    r = make()
    assert r.sm.store_consistent() is True
    for i in range(4):
        r.produce(b"x" * i, now_ms=100 * i)
    with r.store.read() as txn:
        assert checks.of_batches(txn.items(BATCHES)) == r.apply(commands.CHECKPOINT_COMMAND).digest
    r.apply(commands.encode_trim(10_000, 1, -1, -1))  # everything removed
    assert r.apply(commands.CHECKPOINT_COMMAND).digest == 0 and r.sm.store_consistent()


def test_a_diverged_replica_disagrees_and_a_changed_batch_is_found(make):
    a, b = make("a"), make("b")
    a.produce(b"same")
    b.produce(b"same")
    a.produce(b"one")
    b.produce(b"other")
    assert a.apply(commands.CHECKPOINT_COMMAND) != b.apply(commands.CHECKPOINT_COMMAND)
    with a.store.write() as txn:  # bit rot: a stored batch changes behind the state machine
        key, value = next(iter(txn.items(BATCHES)))
        key, value = bytes(key), bytearray(value)
        value[-1] ^= 1
        txn.put(BATCHES, key, bytes(value))
    assert a.sm.store_consistent() is False and b.sm.store_consistent() is True


def test_a_store_changed_on_disk_is_reported_when_opened(make, caplog):
    from raftbus.broker.log.verify import check_on_open
    r = make()
    r.produce(b"kept")
    assert check_on_open("p1.0", r.sm, r.store, 0) is None  # checking on open is off
    with r.store.write() as txn:
        key, value = next(iter(txn.items(BATCHES)))
        txn.put(BATCHES, bytes(key), bytes(value)[:-1] + b"!")
    with caplog.at_level("ERROR", logger="raftbus.broker.log.verify"):
        assert check_on_open("p1.0", r.sm, r.store, -1).wait(10)
    assert "does not match its checksum" in caplog.text
