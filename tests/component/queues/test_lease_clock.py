"""Goal: queue leases follow the leader's monotonic, term-relative clock: a wall-clock step forward does not
expire a lease early, a step back does not freeze it, and delayed messages keep their delay."""
import pytest

from tests.component.queue_harness import QueueBroker

HOUR_MS = 3_600_000
VISIBILITY_MS = 10_000


@pytest.fixture
def broker():
    b = QueueBroker()
    b.create("jobs")
    return b


def leased_one(broker):
    broker.put("jobs", b"a")
    (leased,) = broker.queues.lease("jobs", 0, max_messages=1, visibility_ms=VISIBILITY_MS)
    return leased


def tick(broker):
    broker.queues.tick_if_due(broker.replica("jobs"), broker.context.topic("jobs"))
    return broker.replica("jobs").state_machine.counts()  # (ready, delayed, in_flight, dead)


def test_a_wall_clock_step_forward_does_not_expire_a_lease(broker):
    leased = leased_one(broker)
    broker.clock.step_wall(HOUR_MS)
    assert tick(broker) == (0, 0, 1, 0)
    assert broker.queues.ack("jobs", 0, [(leased.message_id, leased.delivery_count)]) == [None]


def test_a_wall_clock_step_back_does_not_freeze_a_lease(broker):
    leased_one(broker)
    broker.clock.step_wall(-HOUR_MS)
    broker.clock.advance(VISIBILITY_MS - 1)
    assert tick(broker) == (0, 0, 1, 0)
    broker.clock.advance(1)
    assert tick(broker) == (0, 1, 0, 0)  # expired on time: back after its retry backoff


def test_an_extended_lease_counts_from_the_monotonic_clock(broker):
    leased = leased_one(broker)
    broker.clock.step_wall(-HOUR_MS)
    (deadline,) = broker.queues.extend("jobs", 0, [(leased.message_id, leased.delivery_count, VISIBILITY_MS)])
    assert deadline == 1_000_000 + VISIBILITY_MS
    broker.clock.step_wall(2 * HOUR_MS)
    broker.clock.advance(VISIBILITY_MS - 1)
    assert tick(broker) == (0, 0, 1, 0)
