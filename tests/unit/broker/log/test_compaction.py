"""Goal: a compacted partition keeps each key's latest record in its index, decides compare-and-set where it applies,
and compaction planned from the log and applied by every replica removes exactly what the rules say, at the same
offsets, leaving replicas identical."""
from __future__ import annotations

import random

import pytest

from raftbus.broker import commands
from raftbus.broker.log import compaction, compaction_commands as cc, key_index
from raftbus.broker.log.compacted import NO_REVISION
from raftbus.broker.log.state import PartitionStateMachine, ProduceResult
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors, kafka_batch
from raftbus.client.records import decode_fetched, encode_batch, encode_stream_batch

PRODUCER = b"p" * 16
KNOBS = compaction.Knobs(min_compaction_lag_ms=0, delete_retention_ms=1_000)


class Partition:
    """A state machine with its own Raft index and helpers for keyed batches."""

    def __init__(self, store, compacted: bool = True):
        self.sm = PartitionStateMachine(store)
        self.index = 0
        self.sequence = 0
        if compacted:
            self.apply(cc.encode_policy(True))

    def apply(self, command):
        self.index += 1
        return self.sm.apply(self.index, command)

    def command(self, records, now_ms, *, raftbus_format=False, producer=PRODUCER, sequence=None):
        encode = encode_batch if raftbus_format else encode_stream_batch
        blob, count, max_ts = encode([(now_ms, k, v, ()) for k, v in records])
        if sequence is None:
            sequence = self.sequence
        return commands.encode_produce(now_ms, producer, sequence, count, max_ts, blob), count

    def put(self, records, now_ms=1_000, **options):
        command, count = self.command(records, now_ms, **options)
        result = self.apply(command)
        if not isinstance(result, errors.RaftbusError):
            self.sequence += count
        return result

    def cas(self, key, value, expected, now_ms=1_000, sequence=None):
        command, _ = self.command([(key, value)], now_ms, sequence=sequence)
        result = self.apply(cc.encode_conditional(expected, command))
        if sequence is None and (not isinstance(result, errors.RaftbusError)
                                 or isinstance(result, errors.RevisionMismatch)):
            self.sequence += 1
        return result

    def records(self):
        _, high_watermark = self.sm.offsets()
        start, _ = self.sm.offsets()
        if start == high_watermark:
            return []
        read = self.sm.read(start, 1 << 30)
        return [(r.offset, r.key, r.value) for r in decode_fetched("t", 0, read.batches, start)]

    def compact(self, now_ms, knobs=KNOBS, command_bytes_max=1 << 20, key_map_bytes_max=1 << 20):
        """One whole pass planned as the leader plans it, applied as a replica applies it; the applied results."""
        key_map = compaction.KeyMap(key_map_bytes_max)
        end = self.sm.last_batch_offset()
        start, _ = self.sm.offsets()
        results = []
        while start < end:
            step = self.plan(start, end, now_ms, knobs, key_map, command_bytes_max)
            results.append(self.apply(cc.encode_compact(now_ms, step.next_offset if step.finished else -1,
                                                        step.rewrites)))
            if step.finished:
                break
            start = step.next_offset
        return results

    def plan(self, start, end, now_ms, knobs, key_map, command_bytes_max):
        batches = self.sm.stored_batches(start, 1 << 30)
        key_map.lookup = lambda key: self.sm.lookup(key)[0]
        return compaction.plan_step(batches, key_map, now_ms, knobs, end, command_bytes_max)


@pytest.fixture(params=["memory", "lmdb"])
def store_factory(request, tmp_path):
    stores = []

    def make():
        if request.param == "memory":
            return MemoryStore(PartitionStateMachine.TABLES)
        store = LmdbStore(str(tmp_path / f"store{len(stores)}"), PartitionStateMachine.TABLES, 1 << 22)
        stores.append(store)
        return store
    yield make
    for store in stores:
        store.close()


@pytest.fixture
def partition(store_factory):
    return Partition(store_factory())


# ---------------------------------------------------------------------- the key index
def test_the_index_holds_each_keys_latest_record_and_tombstones(partition):
    """Goal: after appends, each key's entry is its latest record's offset, a null value marks a tombstone."""
    partition.put([(b"a", b"1"), (b"b", b"1"), (b"a", b"2")])
    partition.put([(b"b", None), (b"c", b"1")])
    assert partition.sm.lookup(b"a")[0] == key_index.Entry(2, False)
    assert partition.sm.lookup(b"b")[0] == key_index.Entry(3, True)
    assert partition.sm.lookup(b"c")[0] == key_index.Entry(4, False)
    assert partition.sm.lookup(b"zz")[0] is None
    assert [k for k, _ in partition.sm.key_entries(b"", None, 10)] == [b"a", b"c"]
    assert partition.sm.record_at(2).value == b"2"
    assert partition.sm.store_consistent() is True


@pytest.mark.parametrize("records, error", [
    ([(b"a", b"1"), (None, b"x")], errors.KeyRequired),
    ([(b"k" * (key_index.KEY_BYTES_LIMIT + 1), b"x")], errors.KeyTooLarge),
])
def test_a_compacted_partition_refuses_what_it_cannot_index(partition, records, error):
    """Goal: a batch with a record without a key or with an oversized key is refused whole, nothing appended."""
    assert isinstance(partition.put(records), error)
    assert partition.sm.offsets() == (0, 0)
    assert partition.sm.lookup(b"a")[0] is None


def test_a_stream_partition_without_compaction_keeps_no_index(store_factory):
    """Goal: without the policy command the partition indexes nothing and takes keyless records."""
    plain = Partition(store_factory(), compacted=False)
    assert plain.put([(None, b"x"), (b"a", b"1")]) == ProduceResult(0, False, 1_000)
    assert plain.sm.lookup(b"a")[0] is None
    assert isinstance(plain.cas(b"a", b"2", NO_REVISION), errors.NotCompacted)


def test_switching_compaction_on_builds_the_index_back_to_the_log_start(store_factory):
    """Goal: records appended before the policy are indexed by backfills, never overriding newer entries."""
    p = Partition(store_factory(), compacted=False)
    p.put([(b"a", b"1"), (b"b", b"1")])
    p.put([(b"a", b"2")])
    p.apply(cc.encode_policy(True))
    assert not p.sm.compaction_state().index_ready(0)
    p.put([(b"b", b"3")])  # offset 3, indexed at once
    assert isinstance(p.apply(cc.encode_backfill(0, 2)), errors.InvalidArgument)  # must end where the index starts
    assert p.apply(cc.encode_backfill(2, 3)) == 1
    assert p.apply(cc.encode_backfill(0, 2)) == 2
    assert p.sm.compaction_state().index_ready(0)
    assert p.sm.lookup(b"a")[0].offset == 2 and p.sm.lookup(b"b")[0].offset == 3


# ---------------------------------------------------------------------- compare-and-set
def test_compare_and_set_holds_only_at_the_keys_revision(partition):
    """Goal: CAS appends at the expected revision only; a refused one writes nothing and consumes its sequence."""
    assert partition.cas(b"a", b"1", NO_REVISION).base_offset == 0
    assert isinstance(partition.cas(b"a", b"x", NO_REVISION), errors.RevisionMismatch)
    assert partition.cas(b"a", b"2", 0).base_offset == 1
    assert isinstance(partition.cas(b"a", b"y", 0), errors.RevisionMismatch)
    assert partition.put([(b"a", None)]).base_offset == 2
    assert partition.cas(b"a", b"again", NO_REVISION).base_offset == 3  # a deleted key is absent
    assert [r[2] for r in partition.records()] == [b"1", b"2", None, b"again"]


def test_a_retried_compare_and_set_gets_its_first_answer_again(partition):
    """Goal: a retry (same producer and sequence) of a CAS that held is a duplicate, of one refused a refusal."""
    assert partition.cas(b"a", b"1", NO_REVISION, sequence=0).base_offset == 0
    retried = partition.cas(b"a", b"1", NO_REVISION, sequence=0)
    assert retried == ProduceResult(0, True, 1_000)
    assert isinstance(partition.cas(b"a", b"z", 7, sequence=1), errors.RevisionMismatch)
    assert isinstance(partition.cas(b"a", b"z", 7, sequence=1), errors.RevisionMismatch)
    assert partition.cas(b"a", b"2", 0, sequence=2).base_offset == 1
    assert partition.sm.offsets() == (0, 2)


# ---------------------------------------------------------------------- planning and applying
PASS_CASES = [
    # (batches of (key, value) appended at the given times, now_ms, knobs, surviving (offset, key, value))
    ("superseded values go", [((b"a", b"1"), (b"b", b"1")), ((b"a", b"2"),), ((b"c", b"1"),)], [0, 0, 0],
     10_000, KNOBS, [(1, b"b", b"1"), (2, b"a", b"2"), (3, b"c", b"1")]),
    ("the last batch is never planned", [((b"a", b"1"),), ((b"a", b"2"), (b"a", b"3"))], [0, 0],
     10_000, KNOBS, [(1, b"a", b"2"), (2, b"a", b"3")]),
    ("records younger than the lag stay", [((b"a", b"1"),), ((b"a", b"2"),), ((b"b", b"1"),)], [9_500] * 3,
     10_000, compaction.Knobs(1_000, 1_000), [(0, b"a", b"1"), (1, b"a", b"2"), (2, b"b", b"1")]),
    ("past the lag they go", [((b"a", b"1"),), ((b"a", b"2"),), ((b"b", b"1"),)], [0, 9_500, 9_500],
     10_000, compaction.Knobs(1_000, 1_000), [(1, b"a", b"2"), (2, b"b", b"1")]),
    ("a fresh tombstone stays", [((b"a", b"1"),), ((b"a", None),), ((b"b", b"1"),)], [0, 9_500, 9_500],
     10_000, KNOBS, [(1, b"a", None), (2, b"b", b"1")]),
    ("a fresh superseded tombstone stays", [((b"a", None),), ((b"a", b"2"),), ((b"b", b"1"),)], [0, 9_500, 9_500],
     10_000, compaction.Knobs(0, 20_000), [(0, b"a", None), (1, b"a", b"2"), (2, b"b", b"1")]),
    ("an expired superseded tombstone goes", [((b"a", None),), ((b"a", b"2"),), ((b"b", b"1"),)], [0, 9_500, 9_500],
     10_000, KNOBS, [(1, b"a", b"2"), (2, b"b", b"1")]),
    ("an expired tombstone goes", [((b"a", b"1"),), ((b"a", None),), ((b"b", b"1"),)], [0, 8_000, 9_500],
     10_000, KNOBS, [(2, b"b", b"1")]),
    ("survivors keep their offsets", [((b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1")), ((b"c", b"2"),)],
     [0, 0], 10_000, KNOBS, [(1, b"b", b"1"), (2, b"a", b"2"), (4, b"c", b"2")]),
]


@pytest.mark.parametrize("name, batches, times, now_ms, knobs, survivors", PASS_CASES, ids=[c[0] for c in PASS_CASES])
@pytest.mark.parametrize("raftbus_format", [False, True], ids=["kafka", "raftbus"])
def test_a_pass_keeps_what_the_rules_say(store_factory, name, batches, times, now_ms, knobs, survivors,
                                         raftbus_format):
    """Goal: one pass over batches of either format leaves exactly the expected records at their offsets."""
    p = Partition(store_factory())
    for records, at in zip(batches, times):
        assert not isinstance(p.put(list(records), now_ms=at, raftbus_format=raftbus_format), errors.RaftbusError)
    _, high_watermark = p.sm.offsets()
    p.compact(now_ms, knobs)
    assert p.records() == survivors
    assert p.sm.offsets() == (0, high_watermark)
    assert p.sm.store_consistent() is True


def test_a_compacted_kafka_batch_keeps_its_span_and_producer_fields(partition):
    """Goal: the rewritten batch keeps base offset, last offset delta, producer fields and a valid CRC-32C."""
    partition.put([(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", b"2"), (b"c", b"1")])
    partition.put([(b"a", b"3"), (b"b", b"3")])
    partition.compact(10_000)
    stored = partition.sm.stored_batches(0, 1 << 20)[0][1]
    blob = stored[24:]
    header = kafka_batch.read_header(blob)
    kafka_batch.check_crc(blob, header)
    assert (header.record_count, header.last_offset_delta) == (1, 4)
    assert [r.offset for r in kafka_batch.decode_batch(blob, 0)] == [4]


def test_a_rewrite_of_a_batch_that_changed_since_it_was_planned_is_skipped(partition):
    """Goal: a planned rewrite applies only to the batch it was planned from (its digest term unchanged)."""
    partition.put([(b"a", b"1")])
    partition.put([(b"a", b"2")])
    partition.put([(b"a", b"3")])
    key_map = compaction.KeyMap(1 << 20)
    step = partition.plan(0, 2, 10_000, KNOBS, key_map, 1 << 20)
    stale = cc.Rewrite(step.rewrites[0].base_offset, step.rewrites[0].old_term ^ 1, None, ())
    applied = partition.apply(cc.encode_compact(10_000, -1, (stale,)))
    assert (applied.rewritten, applied.skipped) == (0, 1)
    assert [r[0] for r in partition.records()] == [0, 1, 2]


def test_commands_stay_within_their_bound(partition):
    """Goal: a pass is cut into commands that each stay within command_bytes_max (one rewrite always fits)."""
    for i in range(20):
        partition.put([(b"k%d" % (i % 3), b"x" * 200)])
    key_map = compaction.KeyMap(1 << 20)
    step = partition.plan(0, 19, 10_000, KNOBS, key_map, 700)
    assert len(step.rewrites) == 2 and step.next_offset == 2 and not step.finished
    assert sum(cc.rewrite_bytes(r) for r in step.rewrites) <= 700
    single = partition.plan(0, 19, 10_000, KNOBS, key_map, 10)
    assert len(single.rewrites) == 1 and single.next_offset == 1


def test_the_key_map_stays_within_its_memory_bound():
    """Goal: the planner's key map never holds more than its bound, and still answers every lookup."""
    key_map = compaction.KeyMap(3 * (compaction.KEY_MAP_ENTRY_OVERHEAD_BYTES + 2))
    key_map.lookup = lambda key: key_index.Entry(int(key[1:]), False)
    for i in range(50):
        assert key_map.latest(b"k%d" % (i % 7)).offset == i % 7
    assert key_map.peak_bytes <= 3 * (compaction.KEY_MAP_ENTRY_OVERHEAD_BYTES + 2)


def test_an_expired_tombstone_leaves_the_index(partition):
    """Goal: removing a key's tombstone drops its index entry; a put after it starts the key again."""
    partition.put([(b"a", b"1")], now_ms=0)
    partition.put([(b"a", None)], now_ms=0)
    partition.put([(b"b", b"1")], now_ms=0)
    partition.compact(10_000)
    assert partition.sm.lookup(b"a")[0] is None
    assert partition.cas(b"a", b"new", NO_REVISION).base_offset == 3


def test_replicas_applying_the_same_log_with_compactions_stay_identical(store_factory):
    """Goal: a seeded workload with passes in between, applied by two replicas, gives equal checkpoints and the
    latest value of every key equal to a model's."""
    rng = random.Random(35)
    leader, follower = Partition(store_factory()), Partition(store_factory())
    model: dict[bytes, bytes | None] = {}
    now = 0
    for step in range(300):
        now += rng.randint(1, 50)
        key = b"key-%d" % rng.randint(0, 40)
        value = None if rng.random() < 0.15 else b"v%d" % step
        command, _ = leader.command([(key, value)], now)
        leader.sequence += 1
        for replica in (leader, follower):
            replica.apply(command)
        model[key] = value
        if step % 37 == 36:
            key_map = compaction.KeyMap(1 << 12)
            end = leader.sm.last_batch_offset()
            planned = leader.plan(leader.sm.offsets()[0], end, now, compaction.Knobs(200, 500), key_map, 2_000)
            command = cc.encode_compact(now, planned.next_offset, planned.rewrites)
            for replica in (leader, follower):
                replica.apply(command)
    for replica in (leader, follower):
        replica.apply(commands.CHECKPOINT_COMMAND)
    assert leader.sm.checkpoint() == follower.sm.checkpoint()
    assert leader.sm.store_consistent() and follower.sm.store_consistent()
    latest = {}
    for _, key, value in leader.records():
        latest[key] = value
    assert {k: v for k, v in latest.items() if v is not None} == {k: v for k, v in model.items() if v is not None}
    assert len(leader.records()) < 300
