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
