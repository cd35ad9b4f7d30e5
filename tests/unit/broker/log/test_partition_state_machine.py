"""Goal: the partition state machine turns commands into a gapless, deduplicated, trimmable log, on both stores."""
import io

import pytest

from raftbus.broker import commands
from raftbus.broker.log.state import PartitionStateMachine, ProduceResult
from raftbus.broker.storage.base import StorageFailure
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors
from raftbus.client.records import decode_fetched, encode_batch, iter_stored_batches
from tests.faulty_store import FaultyStore

PRODUCER = b"p" * 16
OTHER = b"q" * 16


class Log:
    """A state machine plus its own Raft index counter, with small command helpers."""

    def __init__(self, store):
        self.store = store
        self.sm = PartitionStateMachine(store)
        self.index = self.sm.applied_index()

    def apply(self, command):
        self.index += 1
        return self.sm.apply(self.index, command)

    def produce(self, count=1, *, producer=PRODUCER, sequence=0, now_ms=1_000, timestamps=None, value=b"v"):
        timestamps = timestamps or [now_ms] * count
        blob, record_count, max_ts = encode_batch([(ts, None, value, ()) for ts in timestamps])
        return self.apply(commands.encode_produce(now_ms, producer, sequence, record_count, max_ts, blob))

    def trim(self, now_ms, retention_ms=-1, retention_bytes=-1, producer_idle_ms=-1):
        return self.apply(commands.encode_trim(now_ms, retention_ms, retention_bytes, producer_idle_ms))

    def offsets_read(self, offset, max_bytes=1 << 20):
        return [b.base_offset for b in iter_stored_batches(self.sm.read(offset, max_bytes).batches)]


@pytest.fixture(params=["memory", "lmdb"])
def log(request, tmp_path):
    if request.param == "memory":
        yield Log(MemoryStore(PartitionStateMachine.TABLES))
        return
    store = LmdbStore(str(tmp_path / "store"), PartitionStateMachine.TABLES, 1 << 20)
    yield Log(store)
    store.close()


@pytest.fixture
def memory_log():
    return Log(MemoryStore(PartitionStateMachine.TABLES))


def test_produce_assigns_gapless_offsets(log):
    results = [log.produce(count, sequence=seq) for count, seq in ((3, 0), (1, 3), (5, 4))]
    assert results == [ProduceResult(0, False, 1_000), ProduceResult(3, False, 1_000), ProduceResult(4, False, 1_000)]
    assert log.sm.offsets() == (0, 9)
    records = list(decode_fetched("t", 0, log.sm.read(0, 1 << 20).batches))
    assert [r.offset for r in records] == list(range(9))


def test_stored_batch_is_the_fetch_format(log):
    log.produce(2, timestamps=[5, 7], now_ms=42)
    (batch,) = iter_stored_batches(log.sm.read(0, 1 << 20).batches)
    assert (batch.base_offset, batch.record_count, batch.append_time_ms, batch.max_timestamp_ms) == (0, 2, 42, 7)


@pytest.mark.parametrize("sequences, expected", [
    # (base_sequence, record_count) per produce -> (base_offset, duplicate) or error class
    ([(0, 2), (0, 2)], [(0, False), (0, True)]),
    ([(0, 2), (2, 1), (0, 2), (2, 1)], [(0, False), (2, False), (0, True), (2, True)]),
    ([(0, 1), (2, 1)], [(0, False), errors.OutOfOrderSequence]),
    ([(0, 7), (7, 1), (8, 3), (11, 1)], [(0, False), (7, False), (8, False), (11, False)]),
    ([(216, 5), (0, 216), (216, 5)], [errors.UnknownProducerId, (0, False), (216, False)]),
    ([(0, 2), (0, 3)], [(0, False), errors.OutOfOrderSequence]),
    ([(i, 1) for i in range(7)] + [(1, 1), (2, 1)], [(i, False) for i in range(7)]
     + [errors.OutOfOrderSequence, (2, True)]),
])
def test_idempotent_producer_sequences(log, sequences, expected):
    outcomes = []
    for seq, count in sequences:
        result = log.produce(count, sequence=seq)
        outcomes.append(type(result) if isinstance(result, errors.RaftbusError) else (result.base_offset,
                                                                                      result.duplicate))
    assert outcomes == expected


def test_duplicate_returns_the_original_append_time_and_appends_nothing(log):
    first = log.produce(2, now_ms=100)
    again = log.produce(2, now_ms=900)
    assert again == ProduceResult(first.base_offset, True, 100)
    assert log.sm.offsets() == (0, 2)


def test_producers_are_independent_and_empty_id_never_deduplicates(memory_log):
    assert memory_log.produce(producer=PRODUCER, sequence=0).base_offset == 0
    assert memory_log.produce(producer=OTHER, sequence=0).base_offset == 1
    assert memory_log.produce(producer=b"", sequence=0).base_offset == 2
    assert memory_log.produce(producer=b"", sequence=0).base_offset == 3


def test_replay_at_or_below_the_applied_index_is_ignored(log):
    log.produce(2)
    command = commands.encode_produce(5, OTHER, 0, 1, 5, encode_batch([(5, None, b"x", ())])[0])
    assert log.sm.apply(1, command) is None
    assert log.sm.apply(0, command) is None
    assert log.sm.offsets() == (0, 2) and log.sm.applied_index() == 1


def test_malformed_commands_return_errors_and_change_nothing(log):
    log.produce(2)
    before = log.sm.read(0, 1 << 20)
    good = commands.encode_produce(1, b"", 0, 1, 1, b"x")
    for bad in (b"", b"?", good[:-1], good[:5], b"T1", commands.encode_delete_topic(name="t", now_ms=1)):
        result = log.apply(bad)
        assert isinstance(result, errors.InvalidArgument), bad
    assert log.sm.read(0, 1 << 20) == before
    assert log.sm.applied_index() == log.index


@pytest.mark.parametrize("offset, expected", [(0, [0, 3]), (2, [0, 3]), (3, [3]), (4, [3]), (5, [])])
def test_read_from_the_batch_holding_the_offset(log, offset, expected):
    log.produce(3, producer=b"")
    log.produce(2, producer=b"")
    assert log.offsets_read(offset) == expected


@pytest.mark.parametrize("offset", [-1, 6])
def test_read_outside_the_log_names_both_bounds(log, offset):
    log.produce(5, producer=b"")
    with pytest.raises(errors.OffsetOutOfRange, match="log_start_offset=0.*high_watermark=5"):
        log.sm.read(offset, 100)


def test_read_stops_at_max_bytes_but_returns_at_least_one_batch(log):
    for _ in range(4):
        log.produce(1, producer=b"", value=b"x" * 100)
    one = len(log.sm.read(0, 1 << 20).batches) // 4
    assert log.offsets_read(0, max_bytes=1) == [0]
    assert log.offsets_read(0, max_bytes=2 * one) == [0, 1]
    assert log.offsets_read(1, max_bytes=2 * one + 1) == [1, 2]


def test_trim_by_time_moves_the_log_start(log):
    for now_ms in (100, 200, 300):
        log.produce(2, producer=b"", now_ms=now_ms)
    assert log.sm.oldest_append_time_ms() == 100
    assert log.trim(now_ms=1_200, retention_ms=1_000) == 4
    assert log.sm.offsets() == (4, 6) and log.sm.oldest_append_time_ms() == 300
    with pytest.raises(errors.OffsetOutOfRange):
        log.sm.read(3, 100)
    assert log.offsets_read(4) == [4]
    log.trim(now_ms=10_000, retention_ms=1_000)
    assert log.sm.offsets() == (6, 6) and log.sm.oldest_append_time_ms() is None and log.sm.size_bytes() == 0
    assert log.produce(1, producer=b"").base_offset == 6


def test_trim_by_size_keeps_the_newest_batches(log):
    for _ in range(5):
        log.produce(1, producer=b"", value=b"x" * 100)
    one = log.sm.size_bytes() // 5
    log.trim(now_ms=0, retention_bytes=2 * one)
    assert log.sm.offsets() == (3, 5) and log.sm.size_bytes() == 2 * one
    assert log.offsets_read(3) == [3, 4]


def test_a_batch_that_follows_the_last_keeps_the_producer_seen(log):
    log.produce(1, sequence=0, now_ms=100)
    log.produce(1, sequence=1, now_ms=900)  # in order: its time is the producer's last seen
    log.trim(now_ms=1_000, producer_idle_ms=500)
    assert log.produce(1, sequence=2, now_ms=1_000) == ProduceResult(2, False, 1_000)


def test_the_producer_keeps_its_last_five_batches_in_any_order_of_arrival(log):
    for sequence in range(12):
        log.produce(1, sequence=sequence, now_ms=sequence)
    assert log.produce(1, sequence=7, now_ms=50) == ProduceResult(7, True, 7)  # the oldest of the five kept
    assert isinstance(log.produce(1, sequence=6, now_ms=50), errors.OutOfOrderSequence)
    assert log.produce(1, sequence=12, now_ms=50) == ProduceResult(12, False, 50)
    assert log.produce(1, sequence=8, now_ms=60) == ProduceResult(8, True, 8)
    assert isinstance(log.produce(1, sequence=7, now_ms=60), errors.OutOfOrderSequence)  # dropped by sequence 12


def test_trim_expires_idle_producers(memory_log):
    memory_log.produce(1, producer=PRODUCER, sequence=0, now_ms=100)
    memory_log.produce(1, producer=OTHER, sequence=0, now_ms=900)
    memory_log.trim(now_ms=1_000, producer_idle_ms=500)
    assert isinstance(memory_log.produce(1, producer=PRODUCER, sequence=1, now_ms=1_000), errors.UnknownProducerId)
    assert memory_log.produce(1, producer=PRODUCER, sequence=0, now_ms=1_000).base_offset == 2
    assert isinstance(memory_log.produce(1, producer=OTHER, sequence=50, now_ms=1_000), errors.OutOfOrderSequence)


@pytest.mark.parametrize("timestamp_ms, expected", [(0, 0), (10, 0), (11, 2), (30, 2), (31, 5), (40, 5), (41, 7)])
def test_offset_for_time(log, timestamp_ms, expected):
    log.produce(2, producer=b"", timestamps=[10, 5])
    log.produce(3, producer=b"", timestamps=[20, 30, 25])
    log.produce(2, producer=b"", timestamps=[15, 40])
    assert log.sm.offset_for_time(timestamp_ms) == expected


def test_offset_for_time_after_trim_never_skips_surviving_batches(memory_log):
    memory_log.produce(1, producer=b"", timestamps=[100], now_ms=1)
    memory_log.produce(1, producer=b"", timestamps=[50], now_ms=2)
    memory_log.produce(1, producer=b"", timestamps=[120], now_ms=3)
    memory_log.trim(now_ms=1, retention_ms=0)
    assert memory_log.sm.offsets() == (1, 3)
    assert memory_log.sm.offset_for_time(40) == 1
    assert memory_log.sm.offset_for_time(110) == 2


def test_reload_after_restore_adopts_the_restored_log(tmp_path):
    source = Log(LmdbStore(str(tmp_path / "a"), PartitionStateMachine.TABLES, 1 << 20))
    target = Log(LmdbStore(str(tmp_path / "b"), PartitionStateMachine.TABLES, 1 << 20))
    try:
        source.produce(3, sequence=0)
        source.produce(2, sequence=3)
        pinned = source.store.snapshot()
        with open(tmp_path / "image", "wb") as f:
            pinned.write_to(f)
        pinned.close()
        with open(tmp_path / "image", "rb") as f:
            target.store.restore(f)
        target.sm.reload()
        assert target.sm.offsets() == (0, 5) and target.sm.applied_index() == 2
        assert target.sm.read(0, 1 << 20) == source.sm.read(0, 1 << 20)
        target.index = 2
        assert target.produce(2, sequence=3).duplicate
    finally:
        source.store.close()
        target.store.close()


def test_reload_on_the_memory_store(memory_log):
    memory_log.produce(4)
    image = io.BytesIO()
    memory_log.store.snapshot().write_to(image)
    image.seek(0)
    other = Log(MemoryStore(PartitionStateMachine.TABLES))
    other.store.restore(image)
    other.sm.reload()
    assert other.sm.offsets() == (0, 4) and other.sm.size_bytes() == memory_log.sm.size_bytes()


def test_a_store_failure_raises_and_applies_nothing(memory_log):
    """A store that fails at commit is not an answer: apply raises (the replica must stop), nothing of the command
    nor its index is applied, and once the store works the same entry applies as it would have."""
    memory_log.produce(1)
    faulty = FaultyStore(memory_log.store)
    faulty.write_fault = StorageFailure("No space left on device", disk_full=True)
    memory_log.sm._store = faulty
    applied = memory_log.sm.applied_index()
    with pytest.raises(StorageFailure):
        memory_log.produce(1, sequence=1)
    assert memory_log.sm.offsets() == (0, 1) and memory_log.sm.applied_index() == applied
    faulty.write_fault = None
    memory_log.index -= 1  # the same committed entry again
    assert memory_log.produce(1, sequence=1).base_offset == 1


def test_a_read_barrier_changes_nothing_but_the_applied_index(log):
    log.produce(2)
    before = log.sm.read(0, 1 << 20)
    assert log.apply(commands.READ_BARRIER_COMMAND) is None
    assert log.sm.read(0, 1 << 20) == before and log.sm.applied_index() == log.index
