"""Goal: the failover benchmark's figures come from what was acknowledged when: the first acknowledgement of a
record sent after the kill, and the longest silence before it; a fresh cluster's ports are its own while it lives,
and a wait for it ends as soon as a broker exits."""
import socket

import pytest

from raftbus.bench.ops import AckLog, BrokerSet, wait_for
from raftbus.client.errors import Unavailable


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


def test_a_fresh_clusters_ports_are_held_until_it_closes(tmp_path):
    cluster = BrokerSet(3, tmp_path, kafka=True)
    ports = [p for pair in cluster.ports for p in pair] + cluster.kafka_ports
    assert len(set(ports)) == 9 and cluster.bootstrap.count("127.0.0.1:") == 3
    for port in ports:  # held: a bind without SO_REUSEPORT (another server, another cluster) fails
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))
    cluster.close()
    with socket.socket() as other:
        other.bind(("127.0.0.1", ports[0]))


def test_a_wait_ends_at_once_with_the_reason_it_cannot_succeed():
    with pytest.raises(Unavailable, match="cluster ready not reached: broker 2 exited with 1: bind failed"):
        wait_for(lambda: False, 60, "cluster ready", gone=lambda: "broker 2 exited with 1: bind failed")
    assert wait_for(lambda: 7, 1, "seven") == 7
