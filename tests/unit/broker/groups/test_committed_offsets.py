"""Goal: committed offsets live in the partition state machine, never go backwards unless reset, refuse stale
generations, stay within the log, survive reopen, and give the append time of the oldest unconsumed record."""
import pytest

from raftbus.broker import commands
from raftbus.broker.groups import commands as group_commands
from raftbus.broker.groups.offset_state import CommittedOffset
from raftbus.broker.log.state import PartitionStateMachine
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors
from raftbus.client.records import encode_batch


class Partition:
    def __init__(self, store):
        self.sm = PartitionStateMachine(store)
        self.index = self.sm.applied_index()

    def apply(self, command):
        self.index += 1
        return self.sm.apply(self.index, command)

    def produce(self, count, now_ms):
        blob, record_count, max_ts = encode_batch([(now_ms, None, b"v", ())] * count)
        return self.apply(commands.encode_produce(now_ms, b"", 0, record_count, max_ts, blob))

    def commit(self, offset, generation=10, reset=False, group="g", metadata="", now_ms=5_000):
        return self.apply(group_commands.encode_commit_offset(group=group, member_id="m", generation=generation, offset=offset,
                                                  metadata=metadata, reset=reset, now_ms=now_ms))

    def read(self, group="g", generation=0):
        return self.apply(group_commands.encode_read_offset(group=group, generation=generation))


@pytest.fixture(params=["memory", "lmdb"])
def part(request, tmp_path):
    if request.param == "memory":
        p = Partition(MemoryStore(PartitionStateMachine.TABLES))
    else:
        p = Partition(LmdbStore(str(tmp_path / "p"), PartitionStateMachine.TABLES, 1 << 20))
    p.produce(10, now_ms=1_000)
    p.produce(10, now_ms=2_000)
    return p


def test_commit_then_read_back(part):
    stored = part.commit(7, metadata="worker-1")
    assert stored == CommittedOffset(7, 10, 5_000, 10, "worker-1")
    assert part.sm.committed("g") == stored and part.read() == stored
    assert part.read("other") is None and part.sm.committed("other") is None


@pytest.mark.parametrize("first, second, error", [
    ({"offset": 5}, {"offset": 6}, None),
    ({"offset": 5}, {"offset": 5}, None),
    ({"offset": 5}, {"offset": 4}, errors.OffsetRegression),
    ({"offset": 5}, {"offset": 2, "reset": True}, None),
    ({"offset": 5, "generation": 10}, {"offset": 9, "generation": 9}, errors.StaleGeneration),
    ({"offset": 5, "generation": 10}, {"offset": 9, "generation": 9, "reset": True}, errors.StaleGeneration),
    ({"offset": 5, "generation": 10}, {"offset": 9, "generation": 12}, None),
    ({"offset": 5}, {"offset": 21}, errors.OffsetOutOfRange),
    ({"offset": 5}, {"offset": 20}, None),
    ({"offset": 5}, {"offset": -1, "reset": True}, errors.InvalidArgument),
])
def test_commit_rules(part, first, second, error):
    part.commit(**first)
    before = part.sm.committed("g")
    result = part.commit(**second)
    if error is None:
        assert result == part.sm.committed("g") and result.offset == second["offset"]
    else:
        assert isinstance(result, error) and part.sm.committed("g") == before
    assert part.sm.applied_index() == part.index


def test_highest_generation_survives_a_reset(part):
    part.commit(5, generation=12)
    part.commit(3, generation=12, reset=True)
    assert part.sm.committed("g").highest_generation == 12
    assert isinstance(part.commit(9, generation=11), errors.StaleGeneration)


def test_groups_are_independent(part):
    part.commit(9, group="a")
    assert part.commit(2, group="b").offset == 2
    assert part.sm.committed("a").offset == 9


def test_malformed_offset_commands_are_errors(part):
    for bad in (b"G{", b'G{"type":"commit_offset"}', b'G{"type":"nope"}',
                b'G{"type":"commit_offset","group":"g","member_id":"m","generation":true,"offset":1,'
                b'"metadata":"","reset":false,"now_ms":1}'):
        assert isinstance(part.apply(bad), errors.InvalidArgument)
    assert part.sm.committed("g") is None


def test_append_time_of_the_oldest_unconsumed_record(part):
    assert part.sm.append_time_ms_at(0) == 1_000
    assert part.sm.append_time_ms_at(9) == 1_000
    assert part.sm.append_time_ms_at(10) == 2_000
    assert part.sm.append_time_ms_at(20) is None
    part.apply(commands.encode_trim(now_ms=3_000, retention_ms=1_500, retention_bytes=-1, producer_idle_ms=-1))
    assert part.sm.offsets() == (10, 20)
    assert part.sm.append_time_ms_at(3) == 2_000  # below the log start: the oldest batch left


def test_committed_offsets_survive_reopen(tmp_path):
    path = str(tmp_path / "p")
    first = Partition(LmdbStore(path, PartitionStateMachine.TABLES, 1 << 20))
    first.produce(5, now_ms=1)
    stored = first.commit(4)
    first.sm._store.close()
    store = LmdbStore(path, PartitionStateMachine.TABLES, 1 << 20)
    try:
        assert PartitionStateMachine(store).committed("g") == stored
    finally:
        store.close()


def test_expiry_drops_only_offsets_still_older_than_the_cutoff(part):
    part.commit(4, group="gone", now_ms=1_000)
    part.commit(6, group="recommitted", now_ms=1_000)
    part.commit(8, group="fresh", now_ms=9_000)
    assert sorted(part.sm.offsets_committed_before(5_000)) == ["gone", "recommitted"]
    part.commit(7, group="recommitted", now_ms=6_000)  # committed again before the expiry applies
    dropped = part.apply(group_commands.encode_expire_offsets(groups=["gone", "recommitted", "never"], committed_before_ms=5_000))
    assert dropped == ["gone"]
    assert part.sm.committed("gone") is None and part.read("gone") is None
    assert part.sm.committed("recommitted").offset == 7 and part.sm.committed("fresh").offset == 8
    assert part.sm.offsets_committed_before(5_000) == []
    assert part.sm.applied_index() == part.index


def test_expire_command_with_bad_group_names_is_refused(part):
    part.commit(4, group="g", now_ms=1_000)
    for bad in (b'G{"type":"expire_offsets","groups":"g","committed_before_ms":5000}',
                b'G{"type":"expire_offsets","groups":[1],"committed_before_ms":5000}',
                b'G{"type":"expire_offsets","groups":["g"]}'):
        assert isinstance(part.apply(bad), errors.InvalidArgument)
    assert part.sm.committed("g").offset == 4


def test_a_new_owners_read_fences_older_generations_before_it_commits(part):
    """The new owner (generation 12) has only read its start; the old owner's late commit (generation 10) is
    refused by the partition itself, and the new owner's commits go through."""
    assert part.read(generation=12) is None  # never committed: the fence alone reads as no committed offset
    assert part.sm.committed("g") is None
    assert isinstance(part.commit(5, generation=10), errors.StaleGeneration)
    assert part.commit(3, generation=12) == CommittedOffset(3, 12, 5_000, 12, "")


def test_a_fence_keeps_the_committed_offset_and_never_lowers_the_highest_generation(part):
    part.commit(7, generation=10)
    assert part.read(generation=15) == CommittedOffset(7, 10, 5_000, 15, "")
    assert part.read(generation=11) == CommittedOffset(7, 10, 5_000, 15, "")
    assert part.read() == CommittedOffset(7, 10, 5_000, 15, "")
    assert isinstance(part.commit(9, generation=14), errors.StaleGeneration)
    assert part.commit(9, generation=15).offset == 9


def test_a_fence_only_entry_expires_like_an_old_commit(part):
    part.read(group="gone", generation=3)
    assert part.sm.offsets_committed_before(1) == ["gone"]
    assert part.apply(group_commands.encode_expire_offsets(groups=["gone"], committed_before_ms=1)) == ["gone"]
    assert part.commit(1, group="gone", generation=1).offset == 1
