"""Goal: the term clock anchors once per term of leadership (at the later of the wall clock and the group's
applied time) and then follows only the monotonic clock, so wall-clock steps within a term change nothing."""
from raftbus.broker.clock import ManualClock, TermClock

HOUR_MS = 3_600_000


def test_a_wall_step_within_a_term_changes_nothing():
    clock = ManualClock(1_000_000)
    stamps = TermClock(clock)
    assert stamps.now_ms("q", 3, applied_ms=0) == 1_000_000
    clock.step_wall(HOUR_MS)
    assert stamps.now_ms("q", 3, applied_ms=0) == 1_000_000
    clock.step_wall(-2 * HOUR_MS)
    clock.advance(250)
    assert stamps.now_ms("q", 3, applied_ms=0) == 1_000_250


def test_a_new_term_never_starts_before_the_applied_time_and_follows_the_wall_clock_after_it():
    clock = ManualClock(1_000_000)
    stamps = TermClock(clock)
    assert stamps.now_ms("q", 1, applied_ms=0) == 1_000_000
    assert stamps.now_ms("q", 2, applied_ms=5_000_000) == 5_000_000  # this broker's wall clock is behind
    clock.advance(10)
    assert stamps.now_ms("q", 2, applied_ms=5_000_000) == 5_000_010
    clock.step_wall(2 * HOUR_MS)
    assert stamps.now_ms("q", 3, applied_ms=5_000_010) == 1_000_010 + 2 * HOUR_MS  # after an outage: the wall clock


def test_groups_are_anchored_apart_and_a_forgotten_group_anchors_again():
    clock = ManualClock(1_000)
    stamps = TermClock(clock)
    assert stamps.now_ms("a", 1, applied_ms=0) == 1_000
    clock.step_wall(500)
    assert stamps.now_ms("b", 1, applied_ms=0) == 1_500
    assert stamps.now_ms("a", 1, applied_ms=0) == 1_000
    stamps.forget("a")
    assert stamps.now_ms("a", 1, applied_ms=0) == 1_500


def test_a_new_term_keeps_the_leases_that_ran_out_before_it_for_the_grace():
    """For the first grace_ms of a term, leases whose deadline fell after the time the group had applied when the
    term's clock anchored and at or before the anchor are kept (leaderless time is not taken from the consumers);
    after it, none."""
    clock = ManualClock(1_000_000)
    stamps = TermClock(clock, grace_ms=3_000)
    first = stamps.stamp("q", 2, applied_ms=998_000)
    assert first.now_ms == 1_000_000 and first.kept_leases == (998_000, 1_000_000)
    assert [first.lease_expires_ms(t) for t in (997_000, 999_000, 1_000_500)] == [997_000, 1_003_000, 1_000_500]
    clock.advance(2_999)
    assert stamps.stamp("q", 2, applied_ms=1_002_000).kept_leases == (998_000, 1_000_000)  # the anchor's
    clock.advance(1)
    assert stamps.stamp("q", 2, applied_ms=1_002_000).kept_leases is None
    assert TermClock(clock, grace_ms=0).stamp("q", 2, applied_ms=0).kept_leases is None  # 0: no grace
    assert stamps.stamp("q", 3, applied_ms=2_000_000).kept_leases is None  # the wall clock behind: nothing ran out
