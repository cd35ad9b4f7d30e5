"""Goal: the failover benchmark's figures come from what was acknowledged when: the first acknowledgement of a
record sent after the kill, and the longest silence before it."""
from raftbus.bench.ops import AckLog


def test_failover_is_the_first_ack_of_a_record_sent_after_the_kill():
    log = AckLog()
    log.record(b"a", sent_s=9.0, acked_s=10.2, offset=0)   # in flight at the kill: acknowledged late
    log.record(b"b", sent_s=10.1, acked_s=11.5, offset=1)  # sent after the kill at 10.0
    log.record(b"c", sent_s=10.3, acked_s=11.4, offset=2)
    log.record(b"d", sent_s=10.4, acked_s=11.9, offset=None)  # failed
    assert log.first_ack_of_a_send_after(10.0) == 11.4
    assert log.failed == 1 and len(log) == 3 and log.acked == {b"a": 0, b"b": 1, b"c": 2}


def test_longest_gap_counts_the_edges_of_the_window():
    log = AckLog()
    for acked in (10.1, 10.2, 11.0):
        log.record(str(acked).encode(), sent_s=acked - 0.01, acked_s=acked, offset=1)
    assert round(log.longest_gap_between(10.0, 11.0), 3) == 0.8
    assert round(log.longest_gap_between(10.0, 12.5), 3) == 1.5
    assert log.first_ack_of_a_send_after(20.0) is None
