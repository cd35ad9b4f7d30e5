"""Component test: the sync Producer's queue path against the queue and admin services over a real channel on
port 0 (in-process replication): after a batch fails for good, the partition starts over under a fresh producer
id, so a batch the broker enqueued but whose answer was lost cannot swallow the next batch as its duplicate."""
from __future__ import annotations

import pytest

from raftbus.broker.metadata.servicer import admin_servicers
from raftbus.broker.grpc_server import build_server
from raftbus.broker.queues.servicer import queue_servicers
from raftbus.client import Producer, Queues
from raftbus.client.errors import Unavailable
from tests.component.queue_harness import QueueBroker


@pytest.fixture
def served():
    broker = QueueBroker()
    servicers = admin_servicers(broker.admin) + queue_servicers(broker.queues, broker.dead_letters)
    server, _, port = build_server("127.0.0.1:0", servicers, workers_max=8, message_bytes_max=8 << 20)
    server.start()
    address = f"127.0.0.1:{port}"
    broker.admin.register_broker(1, address, "127.0.0.1:2")
    broker.create("jobs")
    yield address
    server.stop(0).wait()


class _LostAnswer:
    """An Enqueue call the broker applied whose answer never reached the producer (a connection reset)."""

    def add_done_callback(self, fn):
        fn(self)

    def result(self):
        raise ConnectionResetError("the answer was lost")


class LoseFirstAnswer:
    """The queue sender's stubs, but the first Enqueue's answer is lost once the broker has applied it."""

    def __init__(self, stubs):
        self.stubs = stubs
        self.lost = 0

    def for_partition(self, topic, partition):
        stub = self.stubs.for_partition(topic, partition)
        outer = self

        class Enqueue:
            @staticmethod
            def future(request, timeout=None):
                call = stub.Enqueue.future(request, timeout=timeout)
                if outer.lost:
                    return call
                outer.lost += 1
                call.result()  # the broker enqueued the batch
                return _LostAnswer()

        class Stub:
            pass

        Stub.Enqueue = Enqueue
        return Stub


def test_a_batch_whose_answer_was_lost_does_not_swallow_the_next_one(served):
    """The first batch is enqueued but its answer is lost and it fails for good (retries=0); the next batch, of
    the same size, is enqueued as new messages with ids of their own, not answered as that batch's duplicate."""
    with Producer(served, linger_ms=60_000, retries=0) as producer:
        sender = producer._queue_path()
        sender.stubs = LoseFirstAnswer(sender.stubs)
        lost = [producer.send("jobs", value, partition=0) for value in (b"m1", b"m2")]
        producer.flush(10)
        assert all(isinstance(future.exception(5), Unavailable) for future in lost)
        later = [producer.send("jobs", value, partition=0) for value in (b"m3", b"m4")]
        producer.flush(10)
        landed = [future.result(5) for future in later]
    with Queues(served) as queues:
        stored = [(m.message_id, m.value) for m in queues.iter_messages("jobs", 0)]
    assert [value for _, value in stored] == [b"m1", b"m2", b"m3", b"m4"]  # the lost batch's messages are there
    assert [(m.message_id, m.duplicate) for m in landed] == [(stored[2][0], False), (stored[3][0], False)]
