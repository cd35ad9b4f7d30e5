"""Goal: every command round-trips through the codec, and malformed bytes decode to typed error values."""
import pytest

from raftbus.broker import commands
from raftbus.client import errors
from raftbus.client.records import encode_batch, iter_stored_batches


def test_produce_round_trips_and_its_value_is_a_stored_batch():
    blob, count, max_ts = encode_batch([(11, b"k", b"v", ()), (17, None, b"w", ())])
    command = commands.encode_produce(500, b"p" * 16, 42, count, max_ts, blob)
    producer_id, base_sequence, value, record_count, append_time_ms = commands.decode_produce(command)
    assert (producer_id, base_sequence, record_count, append_time_ms) == (b"p" * 16, 42, 2, 500)
    (batch,) = iter_stored_batches((7).to_bytes(8, "big") + bytes(value))
    assert (batch.base_offset, batch.record_count, batch.append_time_ms, batch.max_timestamp_ms) == (7, 2, 500, 17)
    assert bytes(batch.blob) == blob
    assert commands.stored_max_timestamp_ms(value) == 17


def test_produce_value_is_a_view_of_the_command():
    command = commands.encode_produce(1, b"", 0, 1, 1, b"records")
    value = commands.decode_produce(command).value
    assert isinstance(value, memoryview) and value.obj is command


@pytest.mark.parametrize("mutate", [
    lambda c: c[:-1],
    lambda c: c + b"x",
    lambda c: c[:3],
    lambda c: b"P",
    lambda c: b"X" + c[1:],
])
def test_malformed_produce_is_a_corrupt_batch(mutate):
    command = mutate(commands.encode_produce(1, b"id", 0, 1, 1, b"records"))
    with pytest.raises(errors.InvalidArgument):
        commands.decode_produce(command)
    kind, error = commands.decode(command)
    assert kind == commands.INVALID and isinstance(error, errors.InvalidArgument)


@pytest.mark.parametrize("record_count, base_sequence", [(0, 0), (1, -1)])
def test_produce_needs_records_and_a_sequence(record_count, base_sequence):
    command = commands.encode_produce(1, b"", base_sequence, record_count, 1, b"r")
    assert commands.decode(command)[0] == commands.INVALID


def test_trim_round_trips():
    assert commands.decode(commands.encode_trim(10, 20, -1, 40)) == (commands.TRIM, (10, 20, -1, 40))


@pytest.mark.parametrize("command, kind, fields", [
    (commands.encode_register_broker(broker_id=1, address="a:1", raft_address="a:2", now_ms=3),
     commands.REGISTER_BROKER, {"broker_id": 1, "address": "a:1", "raft_address": "a:2", "now_ms": 3}),
    (commands.encode_create_topic(name="t", kind="queue", ordering="fair", partitions=3, replication_factor=2,
                                  retention_ms=-1, retention_bytes=9, now_ms=4),
     commands.CREATE_TOPIC, {"name": "t", "kind": "queue", "ordering": "fair", "partitions": 3,
                             "replication_factor": 2, "retention_ms": -1, "retention_bytes": 9, "now_ms": 4}),
    (commands.encode_delete_topic(name="t", now_ms=5), commands.DELETE_TOPIC, {"name": "t", "now_ms": 5}),
    (commands.encode_alter_partitions(name="t", partitions=6, now_ms=7), commands.ALTER_PARTITIONS,
     {"name": "t", "partitions": 6, "now_ms": 7}),
])
def test_metadata_commands_round_trip(command, kind, fields):
    assert command.startswith(b"J")
    assert commands.decode(command) == (kind, fields)


@pytest.mark.parametrize("command", [
    b"",
    b"Z123",
    b"J",
    b"J[1]",
    b'J{"type":"nope"}',
    b'J{"type":"delete_topic","name":"t"}',
    b'J{"type":"delete_topic","name":1,"now_ms":1}',
    b'J{"type":"alter_partitions","name":"t","partitions":true,"now_ms":1}',
    b"J\xff\xfe",
    b"T" + bytes(31),
])
def test_garbage_decodes_to_an_invalid_argument(command):
    kind, error = commands.decode(command)
    assert kind == commands.INVALID and isinstance(error, errors.InvalidArgument)
