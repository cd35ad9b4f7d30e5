"""Queue-topic options on the Admin service's wire (CreateTopicRequest fields, TopicInfo.queue)."""
from __future__ import annotations

from raftbus.client.wire import raftbus_pb2 as pb

from raftbus.broker.queues.config import OPTIONS


def queue_options_of(request: pb.CreateTopicRequest) -> dict:
    """The queue options a CreateTopic request sets (unset ones are left to the broker's defaults)."""
    return {name: getattr(request, name) for name in OPTIONS if request.HasField(name)}


def queue_options_proto(config) -> pb.QueueOptions | None:
    return None if config is None else pb.QueueOptions(**config.to_dict())
