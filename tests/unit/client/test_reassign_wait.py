"""Unit test of `reassign_partition(wait=True)`: an answer from a metadata replica that lags is not taken as done."""
from __future__ import annotations

from raftbus.client.cluster_admin import MembershipCalls
from raftbus.client.wire import membership_pb2 as mpb


class FakeRouter:
    """Answers the controller's start at once, then a describe per call from `answers` (the last one repeats)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.describes = 0

    def call_controller(self, call):
        return mpb.ReassignmentInfo(topic="t", partition=0, replicas=[1, 2, 3], target=[2, 3, 4])

    def call_partition(self, topic, partition, call):
        self.describes += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class Calls(MembershipCalls):
    request_timeout_s = 1.0
    topic_ready_poll_s = 0.0

    def __init__(self, router):
        self.router = router
        self._clock = lambda: 0.0
        self._sleep = lambda s: None


def info(replicas, target=(), done=True):
    return mpb.ReassignmentInfo(topic="t", partition=0, replicas=list(replicas), target=list(target), done=done)


def test_wait_ignores_a_lagging_replica_that_has_not_seen_the_target():
    """Goal: a leader whose metadata replica does not hold the target yet answers "no move, done" with the old
    placement; the wait goes on until the recorded placement is the one asked for."""
    router = FakeRouter([info([1, 2, 3]), info([1, 2, 3], [2, 3, 4], done=False), info([2, 3, 4])])
    state = Calls(router).reassign_partition("t", 0, [2, 3, 4], wait=True)
    assert state.done and state.replicas == (2, 3, 4)
    assert router.describes == 3
