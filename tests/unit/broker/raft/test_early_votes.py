"""Goal: vote requests for groups not opened yet are kept briefly (bounded by count and age), only vote requests,
latest term per peer, and handed over once."""
from raftbus.broker.raft.early_votes import EarlyVotes


def vote(term: int, **extra) -> dict:
    return {"type": "request_vote", "term": term, "last_log_index": 0, "last_log_term": 0, **extra}


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_kept_vote_request_is_handed_over_once_with_only_its_vote_fields():
    early = EarlyVotes(keep_ms=1000, groups_max=10)
    assert early.keep("p1.0", 2, vote(1, extra_field=b"x" * 1000)) is True
    assert early.take("p1.0") == [(2, vote(1))]
    assert early.take("p1.0") == []
    assert (early.kept_total, early.delivered_total) == (1, 1)


def test_only_well_formed_vote_requests_are_kept():
    early = EarlyVotes(keep_ms=1000, groups_max=10)
    assert early.keep("p1.0", 2, {"type": "append_entries", "term": 1}) is False
    assert early.keep("p1.0", 2, {"type": "request_vote", "term": "1", "last_log_index": 0, "last_log_term": 0}) \
        is False
    assert early.keep("p1.0", 2, {"type": "request_vote", "term": 1}) is False
    assert early.keep("p1.0", 2, [1, 2]) is False
    assert len(early) == 0 and early.take("p1.0") == []


def test_the_latest_term_per_peer_is_kept():
    early = EarlyVotes(keep_ms=1000, groups_max=10)
    early.keep("p1.0", 2, vote(2))
    early.keep("p1.0", 2, vote(1))  # reordered: older than what is held
    early.keep("p1.0", 3, vote(3))
    assert sorted(early.take("p1.0")) == [(2, vote(2)), (3, vote(3))]


def test_requests_older_than_keep_ms_are_not_handed_over_and_stale_groups_are_forgotten():
    clock = Clock()
    early = EarlyVotes(keep_ms=500, groups_max=10, clock=clock)
    early.keep("p1.0", 2, vote(1))
    clock.now += 0.6
    assert early.take("p1.0") == []
    early.keep("p1.1", 2, vote(1))
    clock.now += 0.6
    early.keep("p1.2", 2, vote(1))  # a new group: the stale p1.1 goes
    assert len(early) == 1
    assert early.take("p1.2") == [(2, vote(1))]


def test_at_most_groups_max_groups_the_oldest_go_first():
    early = EarlyVotes(keep_ms=10_000, groups_max=2)
    for group_id in ("p1.0", "p1.1", "p1.2"):
        early.keep(group_id, 2, vote(1))
    assert len(early) == 2
    assert early.take("p1.0") == []
    assert early.take("p1.2") == [(2, vote(1))]


def test_zero_disables_keeping():
    assert EarlyVotes(keep_ms=0, groups_max=10).keep("p1.0", 2, vote(1)) is False
    assert EarlyVotes(keep_ms=1000, groups_max=0).keep("p1.0", 2, vote(1)) is False
