"""Goal: fair queues deliver in hierarchical round-robin across groups (rotating at every level of "."),
by priority within a group, and hold back groups at max_in_flight_per_group — by exact delivery vectors."""
import pytest

from raftbus.broker.queues.state.machine import QueueStateMachine
from raftbus.broker.queues.state.fair import group_path, node_prefixes
from raftbus.broker.storage.memory_store import MemoryStore
from tests.unit.broker.queues.harness import POLICY, QueueHarness, drain, item


def fair_queue(**policy) -> QueueHarness:
    return QueueHarness(MemoryStore(QueueStateMachine.TABLES), "fair", POLICY._replace(**policy))


def enqueue_all(queue, messages):
    """messages: (group, value) or (group, value, priority) in arrival order."""
    queue.enqueue(*(item(m[1].encode(), group=m[0].encode(), priority=m[2] if len(m) > 2 else 0)
                    for m in messages))


@pytest.mark.parametrize("messages, expected", [
    # flat round-robin
    ([("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"), ("c", "c1")],
     ["a1", "b1", "c1", "a2", "a3"]),
    # hierarchy: the root rotates customers, each customer rotates its projects, each project its users
    ([("A.x", "ax1"), ("A.x", "ax2"), ("A.x", "ax3"), ("A.y", "ay1"), ("B", "b1"), ("B", "b2"),
      ("C.z.q", "c1")],
     ["ax1", "b1", "c1", "ay1", "b2", "ax2", "ax3"]),
    # a big customer with many users does not crowd out a small one
    ([("big.u1", "1"), ("big.u2", "2"), ("big.u3", "3"), ("big.u4", "4"), ("small.s", "s1"), ("small.s", "s2")],
     ["1", "s1", "2", "s2", "3", "4"]),
    # three levels rotate independently
    ([("a.p.u", "apu1"), ("a.p.v", "apv1"), ("a.q.w", "aqw1"), ("a.p.u", "apu2"), ("a.q.w", "aqw2"),
      ("a.p.v", "apv2")],
     ["apu1", "aqw1", "apv1", "aqw2", "apu2", "apv2"]),
    # a node's own messages are one more child, served first in its rotation
    ([("A", "own1"), ("A", "own2"), ("A.x", "x1"), ("A.x", "x2")],
     ["own1", "x1", "own2", "x2"]),
    # no group is a group of its own at the root
    ([("", "n1"), ("", "n2"), ("g", "g1")],
     ["n1", "g1", "n2"]),
    # within a group: priority, then arrival
    ([("a", "a-low", 9), ("a", "a-high", 1), ("b", "b1", 5), ("a", "a-mid", 5)],
     ["a-high", "b1", "a-mid", "a-low"]),
])
@pytest.mark.parametrize("batch", [1, 4])
def test_fair_delivery_vectors(messages, expected, batch):
    queue = fair_queue()
    enqueue_all(queue, messages)
    assert [v.decode() for v in drain(queue, batch)] == expected
    queue.check_invariants()


def test_rotation_continues_across_leases_and_new_arrivals():
    queue = fair_queue()
    enqueue_all(queue, [("a", "a1"), ("a", "a2"), ("b", "b1"), ("b", "b2")])
    assert queue.lease_values(1) == [b"a1"]
    enqueue_all(queue, [("c", "c1")])
    assert queue.lease_values(10) == [b"b1", b"c1", b"a2", b"b2"]


def test_max_in_flight_per_group_holds_a_group_back_until_an_ack():
    queue = fair_queue(max_in_flight_per_group=2)
    enqueue_all(queue, [("a", f"a{i}") for i in range(5)] + [("b", "b1")])
    leased = queue.lease(10)
    assert [m.message.record for m in leased] == [b"a0", b"b1", b"a1"]
    assert queue.lease() == [] and queue.sm.counts()[0] == 3 and not queue.sm.deliverable()
    first = leased[0]
    queue.ack((first.seq, first.message.delivery_count))
    assert queue.sm.deliverable()
    assert queue.lease_values(10) == [b"a2"]
    queue.check_invariants()


def test_limit_counts_the_whole_group_key_not_its_parent():
    queue = fair_queue(max_in_flight_per_group=1)
    enqueue_all(queue, [("c.u1", "1a"), ("c.u1", "1b"), ("c.u2", "2a"), ("c.u2", "2b")])
    assert queue.lease_values(10) == [b"1a", b"2a"]


def test_expired_lease_frees_the_group():
    queue = fair_queue(max_in_flight_per_group=1)
    enqueue_all(queue, [("a", "a1"), ("a", "a2")])
    queue.lease(visibility_ms=100)
    assert queue.lease() == []
    queue.advance(100)
    assert queue.lease_values(10) == [b"a1"]  # redelivered first: it has the lower arrival


def test_cursors_of_emptied_nodes_are_dropped():
    queue = fair_queue()
    enqueue_all(queue, [("x.y.z", "1"), ("w", "2")])
    drain(queue)
    assert queue.dump()["cursors"] == {} and queue.dump()["leaves"] == {}


@pytest.mark.parametrize("group, path, prefixes", [
    (b"", b"\x00", [b""]),
    (b"a", b"a\x01\x00", [b"a\x01", b""]),
    (b"a.bc.d", b"a\x01bc\x01d\x01\x00", [b"a\x01bc\x01d\x01", b"a\x01bc\x01", b"a\x01", b""]),
])
def test_group_paths(group, path, prefixes):
    assert group_path(group) == path and node_prefixes(path) == prefixes
