"""Goal: the soak's loss accounting finds every acknowledged record not read back (a gap, a wrong id, a message
never acked) and its verdicts and tables come out of the samples as the docstring of client/bench/soak.py says."""
import argparse

import pytest

from raftbus.bench import soak
from raftbus.client import errors


def test_segments_merge_consecutive_records_with_the_same_id_offset_delta():
    segments = []
    soak.add_to_segments(segments, 0, 500, 0)
    soak.add_to_segments(segments, 500, 500, 0)
    soak.add_to_segments(segments, 1000, 500, 500)  # a batch failed: ids jump ahead of offsets
    assert segments == [[0, 1000, 0], [1000, 1500, 500]]


def test_every_acknowledged_record_must_be_read_at_its_offset_with_its_id():
    acked = [[0, 1000, 0], [1000, 1500, 500]]
    assert soak.missing_records(acked, [[0, 1500, 0], [1000, 1500, 500]]) == 0
    assert soak.missing_records(acked, [[0, 600, 0], [400, 1000, 0], [1000, 1500, 500]]) == 0  # re-read: overlaps
    assert soak.missing_records(acked, [[0, 990, 0], [1000, 1500, 500]]) == 10                  # a gap
    assert soak.missing_records(acked, [[0, 1000, 0], [1000, 1500, 499]]) == 500               # wrong ids there
    assert soak.missing_records(acked, []) == 1500


def test_queue_accounting_counts_messages_never_acked_and_acks_twice():
    enqueued, acked = soak.SeqBits(), soak.SeqBits()
    for seq in range(1, 20_000):
        enqueued.add(seq % 3, seq)
    for seq in range(1, 20_000):
        if seq not in (7, 12_345):
            assert acked.add(seq % 3, seq) is False
    assert acked.add(1, 1) is True
    assert enqueued.missing_from(acked) == 2 and acked.missing_from(enqueued) == 0


def args(**overrides):
    values = dict(minutes=3.0, kill_every_minutes=1.0, report_seconds=60.0, sample_seconds=10.0, group_members=3,
                  produce_rate_per_s=1000, queue_rate_per_s=100, peak_seconds=5.0, plot_out=None,
                  retention_bytes=1 << 20, record_bytes=100, growth_window_minutes=1.0,
                  peaks="together")
    values.update(overrides)
    return argparse.Namespace(**values)


@pytest.mark.parametrize("bad", [dict(minutes=0), dict(kill_every_minutes=3.0), dict(produce_rate_per_s=-1),
                                 dict(report_seconds=0), dict(group_members=4), dict(growth_window_minutes=0)])
def test_bad_arguments_are_refused(bad):
    with pytest.raises(errors.InvalidArgument):
        soak.check_soak_args(args(**bad))


class FakeRun:
    brokers = 2

    def __init__(self):
        self.kills = [{"at_s": 60.0, "broker": 1}, {"at_s": 120.0, "broker": 2}]
        self.intervals = {(load, i): (6000, [10.0] * 98 + [20.0 + 10 * i] * 2) for load in soak.LOADS
                          for i in range(3)}
        sample = {"anon_mb": 100.0, "file_mb": 50.0, "lmdb_mapped_mb": 20.0, "open_files": 50, "lmdb_mb": 30.0,
                  "journal_mb": 10.0}
        self.samples = {(b, i): dict(sample) for b in (1, 2) for i in range(3)}
        self.samples[(2, 2)]["anon_mb"] = 110.0
        self.finals = {"produce": [{"acked": 1500, "failed": 0, "segments": [[[0, 1500, 0]], [], []]}],
                       "group": [{"read": 1490, "segments": [[[0, 1000, 0]], [], []], "ends": [1500, 0, 0]},
                                 {"read": 490, "segments": [[[1000, 1490, 0]], [], []], "ends": [1500, 0, 0]}],
                       "queue": [{"enqueued": 100, "enqueue_failed": 0, "deliveries": 103, "acked": 100,
                                  "acked_twice": 0, "ack_errors": 3, "lost": 0, "lease_counts": {}}]}
        self.unfinished = []


def test_report_gives_growth_against_the_first_kill_latency_ratios_and_losses():
    result = soak.report(FakeRun(), {"produce": 1000, "queue": 100}, {}, 180.0, args())
    assert result["baseline_interval"] == 0 and len(result["intervals"]) == 3
    anon = result["growth"]["anon_mb"]
    assert anon["per_broker_percent"] == {"1": 0.0, "2": 10.0} and anon["max_percent"] == 10.0 and not anon["met"]
    assert result["growth"]["open_files"]["met"]
    produce = result["p99_ratio"]["produce"]
    assert produce["per_period_ms"][0] == pytest.approx(20.0, abs=0.5) and produce["ratio"] > 1
    assert result["lost"] == {"produce": 10, "queue": 0}
    assert result["queue"]["deliveries_per_message"] == 1.03
    table = soak.markdown(result)
    assert "| acknowledged records lost | produce → group | 0 | 10 |" in table
    run = FakeRun()
    run.unfinished = ["group"]
    assert soak.report(run, {"produce": 1000, "queue": 100}, {}, 180.0, args())["lost"]["produce"] is None
    assert table.count("\n| 0 |") + table.count("\n| 60 |") + table.count("\n| 120 |") == 3


def test_growth_compares_the_largest_samples_of_a_window_before_the_first_kill_and_at_the_end():
    """A saw-tooth figure (teeth in intervals 1, 4 and 8) is flat by its largest samples over 2-minute windows,
    while the last interval against the one ending at the first kill compares a trough with a tooth."""
    run = FakeRun()
    run.intervals = {(load, i): (600, [10.0] * 100) for load in soak.LOADS for i in range(9)}
    sample = {"anon_mb": 100.0, "file_mb": 50.0, "lmdb_mapped_mb": 20.0, "open_files": 50, "lmdb_mb": 30.0,
              "journal_mb": 10.0}
    run.samples = {(b, i): dict(sample) for b in (1, 2) for i in range(9)}
    for i in (1, 4, 8):
        run.samples[(1, i)]["journal_mb"] = 15.0
    run.samples[(2, 8)]["lmdb_mb"] = 33.0  # a real rise at the end
    result = soak.report(run, {"produce": 1000, "queue": 100}, {}, 540.0,
                         args(minutes=9.0, kill_every_minutes=3.0, growth_window_minutes=2.0))
    journal, lmdb = result["growth"]["journal_mb"], result["growth"]["lmdb_mb"]
    assert result["baseline_interval"] == 2 and result["growth_window_intervals"] == 2
    assert journal["per_broker_percent"]["1"] == 0.0 and journal["met"]
    assert journal["per_broker_point_percent"]["1"] == 50.0  # the tooth of interval 8 against interval 2's trough
    assert lmdb["per_broker_percent"]["2"] == 10.0 and not lmdb["met"]
    assert "(last interval against the first kill's: 10.0 %)" in soak.markdown(result)


def test_a_paced_loop_sends_what_is_due_since_the_start_in_one_go(monkeypatch):
    """A sender late by half a second at 1,000/s sends the 500 due at once, then nothing until the next is due;
    unpaced it sends one at a time."""
    monkeypatch.setattr(soak.time, "monotonic", lambda: 10.5)
    assert soak._due(10.0, 0, 1000) == 501
    assert soak._due(10.0, 501, 1000) == 0
    assert soak._due(10.0, 600, 1000) == 0
    assert soak._due(10.0, 123, 0) == 1


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_drain_goes_on_while_it_progresses_and_stops_a_bound_after_its_last_progress(monkeypatch):
    """A backlog that takes longer than the bound to drain is drained (each read or ack restarts the bound); a
    drain that stops moving ends one bound after its last progress."""
    monkeypatch.setattr(soak.settings, "BENCH_SOAK_DRAIN_TIMEOUT_MS", 10_000)
    clock = _Clock()
    bound = soak.DrainBound(clock)
    assert not bound.expired()  # nothing noted yet: the drain has not begun
    bound.progressed(0)
    for done in range(1, 10):  # 45 s of draining, 5 s between acks
        clock.now += 5
        bound.progressed(done * 1000)
        assert not bound.expired()
    clock.now += 9.9
    bound.progressed(9000)  # the same count: no progress
    assert not bound.expired()
    clock.now += 0.2
    assert bound.expired()


def test_waiting_for_the_final_reports_gives_up_only_on_a_load_silent_for_the_bound(monkeypatch):
    """A load that keeps sending its figures is waited for however long it drains; one silent for twice the drain
    bound and a report interval is noted as unfinished."""
    monkeypatch.setattr(soak.settings, "BENCH_SOAK_DRAIN_TIMEOUT_MS", 10_000)
    clock = _Clock()
    monkeypatch.setattr(soak.time, "monotonic", clock)
    run = object.__new__(soak.SoakRun)
    run.args, run.progress = args(report_seconds=5.0), lambda message: None
    run.finals, run.heard_from, run.unfinished, run.intervals = {}, {}, [], {}
    sent = []

    def take_results(timeout_s):  # the queue load reports figures every 5 s for 60 s, then its final report
        clock.now += timeout_s
        if clock.now - 100.0 < 60 and (not sent or clock.now - sent[-1] >= 5):
            sent.append(clock.now)
            run.heard_from["queue"] = clock.now
        elif clock.now - 100.0 >= 60:
            run.finals["queue"] = [{"acked": 1}]

    run._take_results = take_results
    run._wait_final({"queue": 1}, {})
    assert run.finals["queue"] and run.unfinished == [] and clock.now >= 160.0

    clock.now, run.finals, run.heard_from = 100.0, {}, {}
    run._take_results = lambda timeout_s: setattr(clock, "now", clock.now + timeout_s)  # silent
    run._wait_final({"queue": 1}, {})
    assert run.unfinished == ["queue"] and 125.0 <= clock.now <= 126.0
