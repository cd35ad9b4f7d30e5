"""Goal: snapshots (full store copies) are amortized against the log written since the last one, and the log
held in memory stays bounded however large the store grows."""
import pytest

from raftbus.broker.raft.group import RaftSettings, compaction_due

SETTINGS = RaftSettings(log_compaction_bytes=64, log_compaction_entries=10, log_bytes_max=1_000,
                        log_entries_max=100, snapshot_copy_ratio_max=4)


@pytest.mark.parametrize("log_bytes, entries, store_bytes, due", [
    (10, 2, 0, False),          # below both minimums
    (64, 2, 256, True),         # enough bytes, store within 4x of them
    (64, 2, 257, False),        # store too large to copy for so little log
    (20, 10, 80, True),         # enough entries, store within 4x
    (20, 10, 81, False),
    (1_000, 1, 10**12, True),   # memory bound in bytes wins over copy cost
    (5, 100, 10**12, True),     # memory bound in entries wins over copy cost
])
def test_compaction_due(log_bytes, entries, store_bytes, due):
    assert compaction_due(SETTINGS, log_bytes, entries, lambda: store_bytes) is due


def test_store_size_is_read_only_when_a_minimum_is_reached():
    def fail():
        raise AssertionError("store size read below the minimums")
    assert compaction_due(SETTINGS, 1, 1, fail) is False
