"""Unit test of `Admin.alter_partitions(wait=True)`: an answer from a metadata replica that has not applied the
growth yet is not taken as done."""
from __future__ import annotations

from raftbus.client.admin import Admin
from raftbus.client.wire import raftbus_pb2 as pb


def topic(partitions: int) -> pb.TopicInfo:
    return pb.TopicInfo(name="t", topic_id=1, kind="stream", partitions=[
        pb.PartitionInfo(partition=p, leader_id=1, replicas=[1, 2, 3], isr=[1, 2, 3]) for p in range(partitions)])


class FakeRouter:
    """The controller grows the topic to 3 at once; GetMetadata answers from `answers` in turn (the last repeats)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.metadata_calls = 0

    def call_controller(self, call):
        return topic(3)

    def call_any(self, call):
        self.metadata_calls += 1
        partitions = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return pb.MetadataResponse(topics=[topic(partitions)])

    def close(self):
        pass


def test_alter_partitions_waits_past_a_replica_that_still_has_the_old_count():
    """Goal: a broker whose metadata replica lags describes the topic with 1 partition, every one led; the wait
    goes on until the description has the 3 partitions the controller answered."""
    router = FakeRouter([1, 1, 3])
    admin = Admin(router=router, sleep=lambda s: None, clock=lambda: 0.0)
    altered = admin.alter_partitions("t", 3)
    assert len(altered.partitions) == 3
    assert router.metadata_calls == 3
