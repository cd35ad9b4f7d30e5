"""Goal: a broker whose Raft logs together pass their memory budget snapshots the group holding the most log,
and leaves every group to its own schedule while they fit."""
from raftbus.broker.raft.loop import RaftLoop


class FakeGroup:
    def __init__(self, group_id, log_bytes):
        self.group_id = group_id
        self.log_bytes = log_bytes
        self.calls = []

    def maybe_compact(self, force=False):
        self.calls.append(force)


def run_housekeeping(budget, sizes):
    loop = RaftLoop(log_bytes_max=budget)
    groups = [FakeGroup(f"p1.{i}", size) for i, size in enumerate(sizes)]
    loop.groups = {g.group_id: g for g in groups}
    loop.awake = dict(loop.groups)
    loop._housekeeping()
    return [g.calls for g in groups]


def test_groups_within_the_budget_compact_on_their_own_schedule_only():
    assert run_housekeeping(1_000, [300, 300, 300]) == [[False], [False], [False]]


def test_over_the_budget_the_largest_log_is_snapshotted_first():
    assert run_housekeeping(1_000, [300, 600, 200]) == [[False], [False, True], [False]]


def test_no_budget_means_no_forced_snapshots():
    assert run_housekeeping(None, [10**12]) == [[False]]


def test_quiesced_groups_are_not_compacted_and_an_unchanged_budget_is_not_recounted():
    loop = RaftLoop(log_bytes_max=1_000)
    awake, quiesced = FakeGroup("p1.0", 600), FakeGroup("p1.1", 600)
    loop.groups = {"p1.0": awake, "p1.1": quiesced}
    loop.awake = {"p1.0": awake}
    loop._housekeeping()
    assert awake.calls == [False, True] and quiesced.calls == []  # over budget: the largest awake-or-not
    awake.log_bytes = quiesced.log_bytes = 100
    loop._housekeeping()  # still counted: the previous round was over the budget
    loop._housekeeping()  # within the budget and nothing applied since: not recounted
    assert awake.calls == [False, True, False, False] and quiesced.calls == []
