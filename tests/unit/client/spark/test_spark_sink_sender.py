"""Goal: a Spark sink task's batches are the same on every attempt, so a replay against the real partition
state machine appends only what the earlier attempt did not, whatever the broker remembers per producer."""
import pytest

from raftbus.broker import commands
from raftbus.broker.log.state import PartitionStateMachine, ProduceResult
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors
from raftbus.client.records import decode_fetched, record_size
from raftbus.client.spark.sink_sender import SequencedSender
from raftbus.client.wire import raftbus_pb2 as pb

PRODUCER = b"s" * 16
TP = ("t", 0)


class StateMachineTransport:
    """Applies each produce request to one real PartitionStateMachine per partition and answers at once.
    `fail_after` sends stop reaching the log (the task dies); `lose_answers` applies then reports a timeout."""

    def __init__(self, logs, fail_after=None, lose_answers=0):
        self.logs = logs
        self.fail_after = fail_after
        self.lose_answers = lose_answers
        self.sent = []

    def send(self, request, done):
        self.sent.append((request.base_sequence, request.record_count))
        if self.fail_after is not None and len(self.sent) > self.fail_after:
            done(None, errors.Unauthenticated("the task is gone"))
            return
        sm = self.logs.setdefault((request.topic, request.partition), PartitionStateMachine(
            MemoryStore(PartitionStateMachine.TABLES)))
        result = sm.apply(sm.applied_index() + 1, commands.encode_produce(
            1_000, request.producer_id, request.base_sequence, request.record_count, request.max_timestamp_ms,
            request.records))
        if isinstance(result, errors.RaftbusError):
            done(None, result)
        elif self.lose_answers:
            self.lose_answers -= 1
            done(None, errors.RequestTimedOut("answer lost"))
        else:
            assert isinstance(result, ProduceResult)
            done(pb.ProduceResponse(base_offset=result.base_offset, duplicate=result.duplicate), None)

    def retry_delay_s(self, err, attempt, topic, partition):
        return 0.0 if err.retriable and attempt < 5 else None


def write(transport, values, batch_bytes_max=100):
    sender = SequencedSender(transport, PRODUCER, batch_bytes_max, 300, delivery_timeout_ms=10_000)
    for value in values:
        sender.add(TP, (1, None, value, ()), record_size(None, value))
    return sender.finish()


def stored_values(logs):
    sm = logs[TP]
    hw = sm.offsets()[1]
    return [r.value for r in decode_fetched(*TP, sm.read(0, 1 << 30).batches)] if hw else []


VALUES = [f"v{n:03}".encode() for n in range(200)]


@pytest.mark.parametrize("died_after", [0, 1, 3, 5, 6, 17, 30])
def test_a_replay_appends_only_what_the_failed_attempt_did_not(died_after):
    """However many batches the first attempt got in (fewer or more than the 5 the broker remembers), the
    replay ends with every value exactly once and in order."""
    logs = {}
    with pytest.raises(errors.Unauthenticated):
        write(StateMachineTransport(logs, fail_after=died_after), VALUES)
    first = stored_values(logs) if logs else []
    replay = StateMachineTransport(logs)
    counts = write(replay, VALUES)
    assert stored_values(logs) == VALUES
    assert counts.already_written == len(first) and counts.appended == len(VALUES) - len(first)


def test_batches_are_cut_the_same_way_on_every_attempt():
    """Two attempts over the same records send the same (sequence, count) batches, none above the limit."""
    one, two = StateMachineTransport({}), StateMachineTransport({})
    write(one, VALUES)
    write(two, VALUES)
    assert one.sent == two.sent and len(one.sent) > 10
    assert [seq for seq, _ in one.sent] == [sum(n for _, n in one.sent[:i]) for i in range(len(one.sent))]


def test_a_lost_answer_is_retried_and_recognised():
    """A batch applied whose answers were lost goes again with its sequence, is answered as a duplicate and
    is not appended twice."""
    logs = {}
    counts = write(StateMachineTransport(logs, lose_answers=3), VALUES)
    assert stored_values(logs) == VALUES
    assert counts.already_written > 0 and counts.appended + counts.already_written == len(VALUES)


def test_an_error_that_must_not_be_retried_fails_the_task():
    with pytest.raises(errors.Unauthenticated):
        write(StateMachineTransport({}, fail_after=2), VALUES)


def test_a_partition_that_forgot_the_task_mid_write_gets_the_rest_under_a_fresh_id():
    """The partition drops the task's producer state between two batches (idle past producer_idle_ms): the next
    batch is refused UNKNOWN_PRODUCER_ID, and the task writes the rest under a fresh producer id from sequence
    0, every value once and in order, all counted as appended."""
    logs = {}
    transport = StateMachineTransport(logs)
    sender = SequencedSender(transport, PRODUCER, 100, 300, delivery_timeout_ms=10_000)
    for value in VALUES[:50]:
        sender.add(TP, (1, None, value, ()), record_size(None, value))
    sender.finish()
    sm = logs[TP]
    sm.apply(sm.applied_index() + 1, commands.encode_trim(2_000, -1, -1, 0))  # forget every idle producer
    before = len(transport.sent)
    for value in VALUES[50:]:
        sender.add(TP, (1, None, value, ()), record_size(None, value))
    counts = sender.finish()
    assert stored_values(logs) == VALUES
    assert (counts.appended, counts.already_written) == (len(VALUES), 0)
    (refused_sequence, count), (restarted_sequence, same_count) = transport.sent[before:before + 2]
    assert (refused_sequence, restarted_sequence, same_count) == (50, 0, count)  # refused, then from 0
