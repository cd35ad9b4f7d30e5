"""Goal: a partition reassignment is metadata (recorded, refused with typed errors, completed only to its target),
its steps are decided from the group's configuration in the documented order, and decommissioning picks
replacements by load."""
import pytest

from raftbus.broker import commands, model
from raftbus.broker.metadata import decommission, reassignment_commands
from raftbus.broker.metadata.reassignment_steps import (ADD_LEARNER, COMPLETE, HAND_OVER, PROMOTE, REMOVE, WAIT, Step,
                                               next_step)
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.context import replica_plan
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors
from tests.unit.broker.metadata.test_metadata_state_machine import Metadata


@pytest.fixture
def meta():
    metadata = Metadata(MemoryStore(MetadataStateMachine.TABLES))
    metadata.register(1, 2, 3, 4)
    metadata.create(partitions=2, replication_factor=3)
    return metadata


def reassign(meta, replicas, partition=0, name="orders", running_max=8, throttle=0):
    return meta.apply(reassignment_commands.encode_reassign(name=name, partition=partition, replicas=replicas,
                                                throttle_bytes_per_s=throttle, reassignments_running_max=running_max,
                                                now_ms=40))


def complete(meta, replicas, partition=0):
    topic = meta.sm.topic("orders")
    return meta.apply(reassignment_commands.encode_complete(name="orders", topic_id=topic.topic_id, partition=partition,
                                                replicas=replicas, now_ms=50))


def test_a_reassignment_is_recorded_then_completed_and_survives_a_reload(meta):
    before = meta.sm.topic("orders").partitions[0]
    target = [b for b in (1, 2, 3, 4) if b != before.replicas[0]]
    moving = reassign(meta, target, throttle=1000)
    assert moving.replicas == before.replicas and moving.target == tuple(target)
    assert moving.throttle_bytes_per_s == 1000 and set(moving.hosts) == {1, 2, 3, 4}
    reloaded = MetadataStateMachine(meta.store).topic("orders").partitions[0]
    assert reloaded == moving
    assert isinstance(complete(meta, [1, 2, 3]), errors.InvalidArgument)  # not its target
    done = complete(meta, target)
    assert done.replicas == tuple(target) and done.target == () and done.throttle_bytes_per_s == 0
    assert meta.sm.topic("orders").partitions[0].to_dict() == {"partition": 0, "replicas": target}


@pytest.mark.parametrize("replicas, error", [
    ([], errors.InvalidReplicas),            # a replication factor of 0
    ([1, 2, 2], errors.InvalidReplicas),     # a broker twice
    ([1, 2, 9], errors.UnknownBroker),       # not registered
])
def test_bad_replica_lists_are_refused_and_change_nothing(meta, replicas, error):
    before = meta.sm.topic("orders")
    assert isinstance(reassign(meta, replicas), error)
    assert meta.sm.topic("orders") == before


def test_concurrent_and_excess_reassignments_are_refused(meta):
    reassign(meta, [4, 3, 2])
    assert isinstance(reassign(meta, [1, 2, 4]), errors.ReassignmentInProgress)
    assert isinstance(reassign(meta, [1, 2, 4], partition=1, running_max=1), errors.ReassignmentInProgress)
    assert isinstance(reassign(meta, [1, 2], partition=7), errors.UnknownPartition)
    assert isinstance(reassign(meta, [1, 2], name="nope"), errors.UnknownTopic)


def test_a_decommissioning_broker_takes_no_new_replicas(meta):
    meta.apply(commands.encode_set_broker_state(broker_id=4, state=model.DECOMMISSIONING, now_ms=45))
    assert isinstance(reassign(meta, [1, 2, 4], partition=1), errors.InvalidReplicas)
    created = meta.create(name="fresh", partitions=4, replication_factor=3)
    assert all(4 not in p.replicas for p in created.partitions)
    assert meta.sm.brokers()[4].draining


def test_replica_plan_opens_target_replicas_and_drops_after_completion(meta):
    current = meta.sm.topic("orders").partitions[0].replicas
    newcomer = ({1, 2, 3, 4} - set(current)).pop()
    leaving = current[-1]
    target = [newcomer, *current[:-1]]
    group_id = f"p{meta.sm.topic('orders').topic_id}.0"
    reassign(meta, target)
    create, _ = replica_plan(meta.sm.topics().values(), newcomer, set())
    assert group_id in create
    assert replica_plan(meta.sm.topics().values(), leaving, {group_id})[1] == []  # kept while moving
    complete(meta, target)
    assert replica_plan(meta.sm.topics().values(), leaving, {group_id})[1] == [group_id]
    assert replica_plan(meta.sm.topics().values(), newcomer, {group_id})[1] == []


@pytest.mark.parametrize("voters, learners, target, lag, leader, expected", [
    ({1, 2, 3}, set(), (2, 3, 4), {}, 1, Step(ADD_LEARNER, 4)),
    ({1, 2, 3}, {4}, (2, 3, 4), {4: 500}, 1, Step(WAIT)),
    ({1, 2, 3}, {4}, (2, 3, 4), {4: 10}, 1, Step(PROMOTE, 4)),
    ({1, 2, 3, 4}, set(), (2, 3, 4), {}, 1, Step(HAND_OVER, 2)),
    ({1, 2, 3, 4}, set(), (2, 3, 4), {}, 2, Step(REMOVE, 1)),
    ({2, 3, 4}, set(), (2, 3, 4), {}, 2, Step(COMPLETE)),
    ({1, 2, 3}, {5}, (2, 3, 4), {}, 1, Step(REMOVE, 5)),       # a learner no longer wanted goes first
    ({1}, set(), (1, 2), {}, 1, Step(ADD_LEARNER, 2)),          # growing the replication factor
    ({1, 2}, set(), (1,), {}, 1, Step(REMOVE, 2)),              # shrinking it
])
def test_steps_follow_the_documented_order(voters, learners, target, lag, leader, expected):
    assert next_step(voters, learners, target, lag, leader, promote_lag_max=64) == expected


def test_decommission_moves_each_replica_to_the_least_loaded_broker():
    topics = [model.Topic("t", 1, "stream", "", -1, -1, 0, (
        model.PartitionPlacement(0, (1, 2, 3)), model.PartitionPlacement(1, (2, 3, 4)),
        model.PartitionPlacement(2, (3, 1, 4)), model.PartitionPlacement(3, (1, 5, 2), target=(5, 2, 4))))]
    planned = decommission.moves(topics, leaving=1, candidates=[2, 3, 4, 5])
    # loads: 1-4 hold three replicas each, 5 one; partition 3 is already moving
    assert planned == [("t", 0, [2, 3, 5]), ("t", 2, [3, 4, 5])]
    with pytest.raises(errors.InvalidReplicas):
        decommission.moves(topics, leaving=1, candidates=[2, 3])
