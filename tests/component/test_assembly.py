"""Goal: each feature registers its own periodic tasks (with the interval its settings section names), threads and
servicers with the assembly, and those tasks do the feature's work when the loop runs them: retention, offset and
member expiry, the queue tick, the dead-letter mover and the broker's registration."""
from __future__ import annotations

import threading

from raftbus.client.wire import raftbus_pb2_grpc as pb_grpc
from tests.component.broker_harness import Broker
from tests.component.harness import InProcessBroker, OpenWhenTold, ServiceBroker
from tests.component.queue_harness import QueueBroker
from tests.helpers import wait_until


def test_each_feature_registers_its_tasks_with_its_own_interval_setting():
    broker = InProcessBroker(retention_check_interval_ms=111, offsets_retention_check_interval_ms=222,
                             group_expiry_check_interval_ms=333, queue_tick_interval_ms=44,
                             membership_check_interval_ms=555, storage_free_check_interval_ms=666,
                             gc_freeze_interval_ms=777)
    tasks = {task.name: task.interval_ms for task in broker.registry.tasks}
    assert tasks == {
        "metadata learner promotion": 555, "reassignment steps": 555, "decommission steps": 555,
        "retention": 111, "offset expiry": 222, "member expiry": 333, "queue tick": 44,
        "reconcile replicas": 50, "starting replicas": 0, "disk faults": 666, "heap freeze": 777,
    }
    assert [t.name for t in broker.registry.threads] == ["raftbus-register", "raftbus-compaction",
                                                         "raftbus-dead-letters"]
    assert InProcessBroker(gc_freeze_interval_ms=0).registry.tasks[-1].name == "disk faults"  # 0: no freezing


def test_the_client_port_serves_what_the_features_registered():
    services = {type(servicer).__name__ for _, servicer in ServiceBroker().servicers()}
    assert services == {"SecurityServicer", "AdminServicer", "IntegrityServicer", "MembershipServicer",
                        "LogServicer", "GroupsServicer", "QueueServicer"}
    adders = {add for add, _ in ServiceBroker().servicers()}
    assert pb_grpc.add_LogServicer_to_server in adders and pb_grpc.add_AdminServicer_to_server in adders


def test_the_tasks_run_on_the_clock_first_at_once_then_every_interval():
    broker = InProcessBroker(retention_check_interval_ms=1_000, queue_tick_interval_ms=100)
    assert {"retention", "queue tick", "reconcile replicas"} <= set(broker.run_tasks())
    assert "retention" not in broker.run_tasks()
    broker.clock.advance(100)
    ran = broker.run_tasks()
    assert "queue tick" in ran and "retention" not in ran
    broker.clock.advance(900)
    assert "retention" in broker.run_tasks()


def test_retention_trims_the_partitions_led_here_when_its_task_runs():
    broker = ServiceBroker(brokers=(1,), retention_check_interval_ms=1_000)
    broker.create_topic("orders", partitions=1, replication_factor=1, retention_ms=60_000)
    broker.produce("orders", 0, [b"old"])
    broker.run_tasks()
    broker.clock.advance(60_001)
    broker.produce("orders", 0, [b"new"], sequence=1)
    assert broker.replica("orders", 0).state_machine.offsets() == (0, 2)
    broker.run_tasks()
    assert broker.replica("orders", 0).state_machine.offsets() == (1, 2)


def test_offsets_of_a_group_gone_expire_when_the_offset_expiry_task_runs():
    broker = Broker(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=1_000,
                    group_empty_retention_ms=10_000, session_timeout_ms=10_000, session_timeout_min_ms=1_000,
                    heartbeat_interval_ms=500)
    broker.create_topic("orders", partitions=1)
    broker.produce("orders", 0, 5)
    member = broker.groups.join("gone", member_id="", client_id="t", topics=["orders"], session_timeout_ms=0,
                                rebalance_timeout_ms=0).member_id
    view = broker.groups.sync("gone", member, broker.metadata_sm.group("gone").generation)
    broker.offsets.commit("gone", member_id=member, generation=view.generation, topic="orders", partition=0, offset=3)
    broker.groups.leave("gone", member)
    replica = next(iter(broker.context.partitions.values()))
    broker.run_tasks()  # the member expiry task starts this broker's controller duties
    broker.clock.advance(60_001)
    broker.run_tasks()  # the empty group is deleted, then its offsets expire at the next offset expiry round
    assert "gone" not in broker.metadata_sm.groups()
    broker.clock.advance(1_000)
    broker.run_tasks()
    assert replica.state_machine.committed("gone") is None


def test_a_silent_member_is_expired_by_the_member_expiry_task():
    broker = Broker(session_timeout_min_ms=1_000, session_timeout_ms=2_000, heartbeat_interval_ms=200)
    broker.create_topic("orders", partitions=1)
    member = broker.groups.join("billing", member_id="", client_id="t", topics=["orders"], session_timeout_ms=0,
                                rebalance_timeout_ms=0).member_id
    broker.run_tasks()
    assert member in broker.metadata_sm.group("billing").members
    broker.clock.advance(2_001)
    broker.run_tasks()
    assert member not in broker.metadata_sm.group("billing").members


def test_the_queue_tick_puts_back_an_expired_lease_of_a_queue_created_after_the_first_tick():
    broker = QueueBroker()
    broker.run_tasks()  # the tick ran before the queue existed: its list of queue replicas is worked out again
    broker.create("jobs")
    broker.put("jobs", b"a")
    broker.queues.lease("jobs", 0, max_messages=1, visibility_ms=1_000)
    broker.clock.advance(1_000)
    broker.run_tasks()
    assert broker.replica("jobs").state_machine.counts() == (0, 1, 0, 0)  # back, after its backoff


def test_the_queue_tick_reaches_a_queue_replica_that_finished_opening_after_its_topic_was_seen():
    """Goal: a replica the opener finishes after the tick already worked out its list (same topics) is ticked."""
    opener = OpenWhenTold()
    broker = QueueBroker(opener=opener)
    broker.admin.create_topic("jobs", partitions=1, replication_factor=1, kind="queue")
    broker.reconcile()
    broker.run_tasks()  # the tick sees the topic, not yet its replica
    opener.run()
    broker.put("jobs", b"a")
    broker.queues.lease("jobs", 0, max_messages=1, visibility_ms=1_000)
    broker.clock.advance(1_000)
    assert "queue tick" in broker.run_tasks()
    assert broker.replica("jobs").state_machine.counts() == (0, 1, 0, 0)


def test_the_dead_letter_thread_moves_dead_messages_until_the_broker_stops():
    broker = QueueBroker(queue_dead_letter_interval_ms=10)
    broker.create("jobs", max_deliveries=1, backoff_base_ms=0, backoff_max_ms=0)
    mid, = broker.put("jobs", b"poison")
    broker.queues.lease("jobs", 0, max_messages=1)
    broker.queues.nack("jobs", 0, [(mid, 1, None, "failed")])
    stopping = threading.Event()
    broker.registry.start_threads(stopping, "test")
    try:
        wait_until(lambda: broker.replica("jobs.dlq").state_machine.counts()[0] == 1, 10, what="the move")
    finally:
        stopping.set()
        broker.registry.join_threads(5.0)
    assert broker.replica("jobs").state_machine.counts() == (0, 0, 0, 0)
    assert not any(t.is_alive() for t in threading.enumerate() if t.name.endswith("-test"))


def test_the_registration_thread_records_this_brokers_addresses():
    broker = InProcessBroker(2, listen="127.0.0.1:7072", raft_listen="127.0.0.1:7073")
    assert broker.metadata_sm.brokers() == {}
    stopping = threading.Event()
    broker.registry.start_threads(stopping, "test")
    try:
        registered = wait_until(lambda: broker.metadata_sm.brokers().get(2), 10, what="the registration")
    finally:
        stopping.set()
        broker.registry.join_threads(5.0)
    assert (registered.address, registered.raft_address) == ("127.0.0.1:7072", "127.0.0.1:7073")
