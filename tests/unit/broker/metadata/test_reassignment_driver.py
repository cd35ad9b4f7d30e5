"""Goal: the leader of a moving partition sets the reassignment's catch-up throttle and lifts it once the
reassignment is over; partitions without a target are not looked at."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import replace
from types import MappingProxyType, SimpleNamespace

from raftbus.broker import model
from raftbus.broker.metadata.reassignment_driver import Reassigner
from raftbus.broker.metadata.settings import MembershipSettings
from raftbus.broker.raft.configuration import Membership

MEMBERSHIP = MembershipSettings(reassign_throttle_bytes_per_s=0, membership_promote_lag_entries_max=100)


class Throttle:
    def __init__(self, bytes_per_s: int):
        self.bytes_per_s = bytes_per_s


class Group:
    """The part of a RaftGroup the reassigner uses: leadership, configuration, learners' progress, throttle."""

    def __init__(self, group_id: str, voters):
        self.group_id, self.is_leader = group_id, True
        self.membership = Membership.of(voters)
        self.transport = SimpleNamespace(throttle=None)
        self.proposals = []

    def set_catch_up_throttle(self, bytes_per_s: int) -> None:
        self.transport.throttle = Throttle(bytes_per_s) if bytes_per_s else None

    def learner_progress(self) -> dict:
        return {}

    def propose_membership(self, change) -> Future:
        self.proposals.append(change(self.membership))
        return Future()


class Metadata:
    def __init__(self, topic):
        self.topic = topic

    def topics(self):
        return MappingProxyType({self.topic.name: self.topic})


def cluster(target=()):
    placements = (model.PartitionPlacement(0, (1, 2, 3), target=target, throttle_bytes_per_s=5000),
                  model.PartitionPlacement(1, (1, 2, 3)))
    topic = SimpleNamespace(name="orders", topic_id=7, partitions=placements)
    groups = {f"p7.{p}": Group(f"p7.{p}", (1, 2, 3)) for p in (0, 1)}
    context = SimpleNamespace(
        node_id=1, metadata_sm=Metadata(topic), metadata_group=None,
        partitions={g: SimpleNamespace(group=group) for g, group in groups.items()})
    return context, groups


def test_the_moving_partitions_leader_throttles_adds_the_learner_and_lifts_the_throttle_when_it_is_done():
    context, groups = cluster(target=(1, 2, 4))
    reassigner = Reassigner(context, MEMBERSHIP)
    reassigner.advance()
    moving, still = groups["p7.0"], groups["p7.1"]
    assert moving.transport.throttle.bytes_per_s == 5000
    assert moving.proposals and moving.proposals[0].learners == {4}
    assert still.transport.throttle is None and not still.proposals

    topic = context.metadata_sm.topic
    done = replace(topic.partitions[0], replicas=(1, 2, 4), target=())
    context.metadata_sm.topic = SimpleNamespace(**{**vars(topic), "partitions": (done, topic.partitions[1])})
    reassigner.advance()
    assert moving.transport.throttle is None


def test_a_follower_takes_no_step_and_sets_no_throttle():
    context, groups = cluster(target=(1, 2, 4))
    groups["p7.0"].is_leader = False
    Reassigner(context, MEMBERSHIP).advance()
    assert groups["p7.0"].transport.throttle is None and not groups["p7.0"].proposals
