"""Goal: the replica opener waits while `starting_max` new replicas have not quiesced, and a replica stops counting
once it quiesces, is forgotten, or has been starting for `starting_timeout_ms`."""
from __future__ import annotations

import threading

from raftbus.broker.raft.starting import StartingReplicas


class Clock:
    def __init__(self):
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def waits(starting: StartingReplicas) -> bool:
    """Whether wait_for_room blocks (checked with a stop event that is already set after one poll)."""
    done = threading.Event()
    stop = threading.Event()
    thread = threading.Thread(target=lambda: (starting.wait_for_room(stop, poll_s=0.01), done.set()))
    thread.start()
    blocked = not done.wait(0.2)
    stop.set()
    thread.join()
    return blocked


def test_the_opener_waits_at_the_bound_until_a_replica_quiesces():
    starting = StartingReplicas(starting_max=2, starting_timeout_ms=10_000, clock=Clock())
    starting.started("p1.0")
    assert not waits(starting)
    starting.started("p1.1")
    assert waits(starting)
    starting.settle(quiesced={"p1.1": 0})
    assert len(starting) == 1 and not waits(starting)


def test_a_replica_that_never_quiesces_stops_counting_after_the_timeout():
    clock = Clock()
    starting = StartingReplicas(starting_max=1, starting_timeout_ms=5_000, clock=clock)
    starting.started("p1.0")
    starting.settle(quiesced={})
    assert waits(starting)
    clock.now += 5.0
    starting.settle(quiesced={})
    assert len(starting) == 0 and not waits(starting)


def test_a_forgotten_replica_makes_room_and_a_waiting_opener_goes_on():
    starting = StartingReplicas(starting_max=1, starting_timeout_ms=10_000, clock=Clock())
    starting.started("p1.0")
    stop, went_on = threading.Event(), threading.Event()
    thread = threading.Thread(target=lambda: (starting.wait_for_room(stop), went_on.set()))
    thread.start()
    assert not went_on.wait(0.1)
    starting.forget("p1.0")
    assert went_on.wait(5.0)
    thread.join()
