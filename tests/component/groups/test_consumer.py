"""Goal: the SDK Consumer, against a real gRPC server over in-process replication, reads from its committed
offsets, commits (sync and async) without going backwards unless it seeks, seeks by offset, beginning, end and
time, calls the rebalance listener in order, rejoins after its session expired, and leaves on close."""
from __future__ import annotations

import pytest

from raftbus.broker.groups import commands as group_commands
from raftbus.broker.grpc_server import build_server
from raftbus.client import Admin, Consumer, TopicPartition
from raftbus.client.errors import OffsetRegression, PartitionNotAssigned
from tests.component.broker_harness import Broker
from tests.helpers import wait_until

TOPIC, GROUP = "orders", "billing"
P0, P1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


@pytest.fixture
def served():
    broker = Broker(session_timeout_min_ms=1_000, heartbeat_interval_ms=200)
    server, _, port = build_server("127.0.0.1:0", broker.servicers(), workers_max=16, message_bytes_max=1 << 24)
    server.start()
    broker.admin.register_broker(1, f"127.0.0.1:{port}", "127.0.0.1:2")
    broker.create_topic(TOPIC, partitions=2)
    for partition in (0, 1):
        broker.produce(TOPIC, partition, 10)
    broker.bootstrap = f"127.0.0.1:{port}"
    yield broker
    server.stop(0)


class Listener:
    def __init__(self):
        self.events: list[tuple[str, set]] = []

    def on_partitions_assigned(self, partitions):
        self.events.append(("assigned", partitions))

    def on_partitions_revoked(self, partitions):
        self.events.append(("revoked", partitions))

    def on_partitions_lost(self, partitions):
        self.events.append(("lost", partitions))


def consumer(broker, **options) -> Consumer:
    options.setdefault("auto_offset_reset", "earliest")
    options.setdefault("enable_auto_commit", False)
    return Consumer(broker.bootstrap, group=GROUP, topics=[TOPIC], session_timeout_ms=1_000,
                    heartbeat_interval_ms=200, **options)


def poll_until(c: Consumer, count: int) -> list:
    got = []
    wait_until(lambda: got.extend(c.poll(0.05)) or len(got) >= count, 10, 0, what=f"{count} records")
    return got


def poll_until_owning(predicate, *consumers: Consumer) -> None:
    """Poll every consumer (rebalances run inside poll) until predicate() holds."""
    def step():
        for c in consumers:
            c.poll(0.02)
        return predicate()
    wait_until(step, 10, 0, what="the expected assignment")


def test_reads_everything_commits_and_resumes_from_the_commit(served):
    with consumer(served) as c:
        records = poll_until(c, 20)
        assert sorted((r.partition, r.offset) for r in records) == [(p, o) for p in (0, 1) for o in range(10)]
        assert c.assignment() == {P0, P1} and c.position(P0) == 10
        c.commit({P0: 4, P1: 10})
        assert (c.committed(P0), c.committed(P1)) == (4, 10)
    served.produce(TOPIC, 1, 2)
    with consumer(served) as again:
        resumed = poll_until(again, 8)
        assert sorted((r.partition, r.offset) for r in resumed) == [(0, o) for o in range(4, 10)] + [(1, 10), (1, 11)]


def test_commit_never_moves_back_unless_the_consumer_seeks(served):
    with consumer(served) as c:
        poll_until(c, 20)
        c.commit()
        with pytest.raises(OffsetRegression):
            c.commit({P0: 3})
        c.seek(P0, 3)
        assert c.commit() == {P0: 3} and c.committed(P0) == 3
        assert [r.offset for r in poll_until(c, 7)] == list(range(3, 10))
        done = []
        c.commit_async(callback=lambda offsets, error: done.append((offsets, error))).result(5)
        assert done == [({P0: 10}, None)] and c.committed(P0) == 10


def test_seek_to_beginning_end_and_time(served):
    with consumer(served, auto_offset_reset="latest") as c:
        poll_until_owning(lambda: c.assignment() == {P0, P1}, c)
        assert c.position(P0) == 10  # latest: the end of the log
        c.seek_to_beginning([P0])
        assert c.position(P0) == 0
        c.seek_to_end()
        assert (c.position(P0), c.position(P1)) == (10, 10)
        served.clock.advance(5_000)
        later = served.clock.now_ms()
        served.produce(TOPIC, 0, 3)
        c.seek_to_beginning()
        c.seek_to_time(later, [P0])
        assert c.position(P0) == 10 and c.position(P1) == 0
        with pytest.raises(PartitionNotAssigned):
            c.seek(TopicPartition(TOPIC, 7), 0)


def test_second_member_gets_its_share_after_the_first_commits_and_revokes(served):
    first_events, second_events = Listener(), Listener()
    with consumer(served, listener=first_events, enable_auto_commit=True) as first:
        poll_until(first, 20)
        with consumer(served, listener=second_events) as second:
            poll_until_owning(lambda: len(second.assignment()) == 1, first, second)
            assert first.assignment().isdisjoint(second.assignment())
            moved = second.assignment()
            assert first_events.events == [("assigned", {P0, P1}), ("revoked", moved)]
            assert second_events.events == [("assigned", moved)]
            (tp,) = moved
            assert second.committed(tp) == 10  # auto-committed by the first member before it let go
            assert len(second.poll(0.1)) == 0 and second.position(tp) == 10  # starts at the committed end
        poll_until_owning(lambda: first.assignment() == {P0, P1}, first)  # back after the second one left


def test_expired_member_loses_its_partitions_and_joins_again(served):
    events = Listener()
    with consumer(served, listener=events) as c:
        poll_until(c, 20)
        old_member = c.member_id
        expiry = group_commands.encode_expire_members(group=GROUP, member_ids=[old_member],
                                                      now_ms=served.clock.now_ms())
        served.metadata_group.submit(expiry).result()  # what the controller does when a session runs out
        poll_until_owning(lambda: c.member_id not in ("", old_member) and c.assignment() == {P0, P1}, c)
        assert ("lost", {P0, P1}) in events.events and events.events[-1] == ("assigned", {P0, P1})


def test_close_commits_and_leaves_and_the_empty_group_keeps_its_offsets(served):
    with consumer(served, enable_auto_commit=True) as c:
        poll_until(c, 20)
    served.produce(TOPIC, 1, 4)
    with Admin(served.bootstrap) as admin:
        group = admin.describe_group(GROUP)
        assert group.state == "empty" and group.members == () and group.topics == (TOPIC,)
        assert [(p.partition, p.owner, p.committed_offset, p.lag_records) for p in group.partitions] == [
            (0, None, 10, 0), (1, None, 10, 4)]
        assert [g.name for g in admin.list_groups()] == [GROUP]
