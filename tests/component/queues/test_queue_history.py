"""Goal: a queue message's history (origin_id, delivery_count, enqueued_ms, last_error) is written by brokers only:
a client enqueue carrying any of it is refused unless a broker's MAC over exactly those messages comes with it,
and nothing is enqueued by a refused request."""
import pytest

from raftbus.broker.queues.history import HistorySigner
from raftbus.broker.raft.cluster_secret import ClusterKeys
from raftbus.broker.queues.model import NewMessage
from raftbus.client import errors
from raftbus.client.queues.ids import message_id
from tests.component.queue_harness import QueueBroker, message


@pytest.fixture
def broker():
    b = QueueBroker()
    b.create("jobs", partitions=1)
    return b


@pytest.mark.parametrize("history", [
    {"origin_id": message_id(0, 7)},
    {"delivery_count": 2**32 - 1},
    {"delivery_count": 1},
    {"enqueued_ms": 5},
    {"last_error": "boom"},
])
def test_a_client_cannot_set_history_fields(broker, history):
    with pytest.raises(errors.InvalidArgument, match="set by brokers only"):
        broker.queues.enqueue("jobs", 0, [message(b"forged", **history)])
    assert broker.queues.stats("jobs", 0).enqueued_total == 0


def test_a_brokers_mac_admits_history_only_for_the_messages_it_covers(broker):
    moved = [message(b"moved", origin_id=message_id(0, 3), delivery_count=5, enqueued_ms=10, last_error="timeout")]
    mac = broker.queues.history.sign("jobs", 0, moved)
    _, results = broker.queues.enqueue("jobs", 0, moved, history_mac=mac)
    stored = broker.queues.get("jobs", results[0][0])
    assert (stored.origin_id, stored.delivery_count, stored.last_error) == (message_id(0, 3), 5, "timeout")
    tampered = [message(b"other", origin_id=message_id(0, 3), delivery_count=5, enqueued_ms=10,
                        last_error="timeout")]
    with pytest.raises(errors.InvalidArgument):
        broker.queues.enqueue("jobs", 0, tampered, history_mac=mac)
    with pytest.raises(errors.InvalidArgument):  # a MAC made with another cluster's secret
        broker.queues.enqueue("jobs", 0, moved, history_mac=HistorySigner(ClusterKeys.of("a" * 40, "another").queue_history).sign("jobs", 0, moved))
    assert broker.queues.stats("jobs", 0).enqueued_total == 1


def test_history_counts_stay_bounded_even_for_brokers(broker):
    moved = [message(b"moved", delivery_count=broker.settings.queues.queue_max_deliveries_max + 1)]
    with pytest.raises(errors.InvalidArgument, match="queue_max_deliveries_max"):
        broker.queues.enqueue("jobs", 0, moved, history_mac=broker.queues.history.sign("jobs", 0, moved))


def test_a_message_whose_record_does_not_parse_is_refused(broker):
    with pytest.raises(errors.CorruptBatch):
        broker.queues.enqueue("jobs", 0, [message(b"ok"), NewMessage(record=b"\x00\x01garbage")])
    assert broker.queues.stats("jobs", 0).enqueued_total == 0


def test_a_mac_under_the_key_of_the_accepted_secret_is_taken_while_a_secret_rotates():
    """A broker still on the other secret (cluster_secret_accepted) moved the message: its MAC is accepted; the
    history key is the cluster's queue-history key, not any other key of the secret."""
    old, new = ClusterKeys.of("o" * 40, "rotation"), ClusterKeys.of("n" * 40, "rotation")
    moved = [message(b"moved", origin_id=message_id(0, 3), delivery_count=1)]
    signer = HistorySigner(new.queue_history, old.queue_history)
    signer.check("jobs", 0, moved, HistorySigner(old.queue_history).sign("jobs", 0, moved))
    with pytest.raises(errors.InvalidArgument):
        signer.check("jobs", 0, moved, HistorySigner(old.internal_client).sign("jobs", 0, moved))
