"""Unit test: Admin's topic reads are the controller's, so a topic change answered to anyone is in them, where
another broker's metadata replica may still lag behind it (the HTTP gateway's delete-then-describe hit one)."""
from __future__ import annotations

import pytest

from raftbus.client import errors
from raftbus.client.admin import Admin
from raftbus.client.wire import raftbus_pb2 as pb

LAGGING = pb.TopicInfo(name="gone", topic_id=1, kind="stream", partitions=[
    pb.PartitionInfo(partition=0, leader_id=1, replicas=[1, 2, 3], isr=[1, 2, 3])])


class FakeRouter:
    """The controller applied the topic's deletion; any other broker's replica has not yet."""

    def call_controller(self, call):
        return call(Controller())

    def call_any(self, call):
        return call(Lagging())

    def close(self):
        pass


class Controller:
    class admin:
        @staticmethod
        def DescribeTopic(request, timeout):
            raise errors.UnknownTopic(f"topic {request.name!r} does not exist")

        @staticmethod
        def ListTopics(request, timeout):
            return pb.ListTopicsResponse(topics=[])


class Lagging:
    class admin:
        @staticmethod
        def DescribeTopic(request, timeout):
            return LAGGING

        @staticmethod
        def ListTopics(request, timeout):
            return pb.ListTopicsResponse(topics=[LAGGING])


def test_a_deleted_topic_is_gone_from_describe_and_list_however_far_another_replica_lags():
    admin = Admin(router=FakeRouter(), sleep=lambda s: None, clock=lambda: 0.0)
    with pytest.raises(errors.UnknownTopic):
        admin.describe_topic("gone")
    assert admin.list_topics() == []
