"""Partition reassignment in the metadata group: the commands that start and finish one, and their rules (pure).

`reassign_partition` records where a partition is going (`PartitionPlacement.target`); the partition's leader then
changes its Raft group one step at a time (metadata/reassignment_driver.py) and, once the group's voters are the target,
proposes `complete_reassignment`, which records the target as the placement. A controller failover changes
nothing: the target lives in the metadata group, the step reached lives in the partition group's own log.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Mapping

from raftbus.client import errors

from raftbus.broker import commands, model

REASSIGN_PARTITION = "reassign_partition"
COMPLETE_REASSIGNMENT = "complete_reassignment"
METADATA_KINDS = frozenset({REASSIGN_PARTITION, COMPLETE_REASSIGNMENT})

commands.register({
    REASSIGN_PARTITION: {"name": str, "partition": int, "replicas": list, "throttle_bytes_per_s": int,
                         "reassignments_running_max": int, "now_ms": int},
    COMPLETE_REASSIGNMENT: {"name": str, "topic_id": int, "partition": int, "replicas": list, "now_ms": int},
})


def _json(command_type: str, **fields) -> bytes:
    return b"J" + json.dumps({"type": command_type, **fields}, separators=(",", ":"), sort_keys=True).encode()


def encode_reassign(*, name: str, partition: int, replicas: list[int], throttle_bytes_per_s: int,
                    reassignments_running_max: int, now_ms: int) -> bytes:
    return _json(REASSIGN_PARTITION, name=name, partition=partition, replicas=list(replicas),
                                 throttle_bytes_per_s=throttle_bytes_per_s,
                                 reassignments_running_max=reassignments_running_max, now_ms=now_ms)


def encode_complete(*, name: str, topic_id: int, partition: int, replicas: list[int], now_ms: int) -> bytes:
    return _json(COMPLETE_REASSIGNMENT, name=name, topic_id=topic_id, partition=partition,
                                 replicas=list(replicas), now_ms=now_ms)


def check_replicas(replicas, brokers: Mapping[int, model.Broker]) -> tuple[int, ...]:
    """A replica list: at least one, no broker twice, every one registered and not being decommissioned."""
    if not isinstance(replicas, list) or not all(type(r) is int for r in replicas):
        raise errors.InvalidReplicas("replicas is a list of broker ids")
    if not replicas:
        raise errors.InvalidReplicas("a partition needs at least one replica (a replication factor of 0 is refused)")
    if len(set(replicas)) != len(replicas):
        raise errors.InvalidReplicas(f"replica list {replicas} names a broker twice")
    unknown = [r for r in replicas if r not in brokers]
    if unknown:
        raise errors.UnknownBroker(f"broker(s) {unknown} are not registered")
    leaving = [r for r in replicas if not brokers[r].placeable]
    if leaving:
        raise errors.InvalidReplicas(f"broker(s) {leaving} are being decommissioned")
    return tuple(replicas)


def running(topics: Mapping[str, model.Topic]) -> int:
    return sum(1 for t in topics.values() for p in t.partitions if p.target)


def plan(topics: Mapping[str, model.Topic], brokers: Mapping[int, model.Broker], kind: str, p: dict):
    """(result, changed topic or None) of a placement command; a refusal raises its typed error."""
    topic = topics.get(p["name"])
    if topic is None:
        raise errors.UnknownTopic(f"topic {p['name']!r} does not exist")
    if not 0 <= p["partition"] < len(topic.partitions):
        raise errors.UnknownPartition(f"topic {topic.name!r} has no partition {p['partition']}")
    placement = topic.partitions[p["partition"]]
    if kind == REASSIGN_PARTITION:
        return _plan_reassign(topics, brokers, topic, placement, p)
    if p["topic_id"] != topic.topic_id or tuple(p["replicas"]) != placement.target:
        raise errors.InvalidArgument(f"{topic.name}/{placement.partition} is not moving to {p['replicas']}")
    done = dataclasses.replace(placement, replicas=placement.target, target=(), throttle_bytes_per_s=0)
    return done, _with(topic, done)


def _plan_reassign(topics, brokers, topic: model.Topic, placement: model.PartitionPlacement, p: dict):
    replicas = check_replicas(p["replicas"], brokers)
    if placement.target:
        raise errors.ReassignmentInProgress(
            f"{topic.name}/{placement.partition} is already moving to {list(placement.target)}")
    if p["throttle_bytes_per_s"] < 0:
        raise errors.InvalidArgument("throttle_bytes_per_s must be >= 0")
    if replicas == placement.replicas:
        return placement, None
    if running(topics) >= p["reassignments_running_max"]:
        raise errors.ReassignmentInProgress(
            f"{running(topics)} reassignments are running (reassignments_running_max={p['reassignments_running_max']})")
    moving = dataclasses.replace(placement, target=replicas, throttle_bytes_per_s=p["throttle_bytes_per_s"])
    return moving, _with(topic, moving)


def _with(topic: model.Topic, placement: model.PartitionPlacement) -> model.Topic:
    partitions = list(topic.partitions)
    partitions[placement.partition] = placement
    return dataclasses.replace(topic, partitions=tuple(partitions))
