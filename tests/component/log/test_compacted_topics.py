"""Component tests: compacted topics through the Log service and the compactor, over in-process replication."""
from __future__ import annotations

import threading

import pytest

from raftbus.broker.context import wait_result
from raftbus.client import errors
from raftbus.client.records import decode_fetched, encode_stream_batch
from tests.component.harness import PRODUCER, ServiceBroker

COMPACT = {"cleanup_policy": "compact", "delete_retention_ms": 1_000, "segment_bytes": 1}


@pytest.fixture
def broker():
    b = ServiceBroker(compaction_command_bytes_max=4096)
    b.sequence = 0
    return b


def put(broker, topic, records, *, expected=None, sequence=None):
    blob, count, max_ts = encode_stream_batch([(broker.clock.now_ms(), k, v, ()) for k, v in records])
    seq = broker.sequence if sequence is None else sequence
    future = broker.log.submit_produce(topic, 0, producer_id=PRODUCER, base_sequence=seq, record_count=count,
                                       max_timestamp_ms=max_ts, records=blob, expected_revision=expected)
    try:
        return wait_result(future, 5)
    finally:
        if sequence is None:
            broker.sequence += count


def records(broker, topic):
    start, high_watermark = broker.replica(topic, 0).state_machine.offsets()
    read = broker.log.fetch(topic, 0, start, max_bytes=1 << 24, max_wait_ms=0)
    return [(r.offset, r.key, r.value) for r in decode_fetched(topic, 0, read.batches, start)]


def test_a_compacted_topic_is_read_by_key_and_compacted_by_its_leader(broker):
    """Goal: puts are read back by key, a pass of the compactor removes superseded values and expired tombstones,
    and reads by key and by offset still give every key's latest value at its offset."""
    broker.create_topic("table", partitions=1, compaction=COMPACT)
    for i in range(30):
        put(broker, "table", [(b"k%d" % (i % 5), b"v%d" % i)])
    put(broker, "table", [(b"k0", None)])
    found, revision, record, _ = broker.log.get_key("table", 0, b"k3")
    assert found and revision == 28 and record.value == b"v28"
    assert broker.log.get_key("table", 0, b"k0")[:2] == (False, 30)
    assert [k for k, _ in broker.log.list_keys("table", 0, b"k", None, 0)[0]] == [b"k1", b"k2", b"k3", b"k4"]
    broker.clock.advance(2_000)
    put(broker, "table", [(b"k9", b"last")])
    assert broker.features.log.compactor.run_once() == 1
    assert records(broker, "table") == [(26, b"k1", b"v26"), (27, b"k2", b"v27"), (28, b"k3", b"v28"),
                                        (29, b"k4", b"v29"), (31, b"k9", b"last")]
    assert broker.log.get_key("table", 0, b"k0")[:2] == (False, -1)
    assert broker.log.get_key("table", 0, b"k4")[2].value == b"v29"
    sm = broker.replica("table", 0).state_machine
    assert sm.offsets() == (0, 32) and sm.store_consistent() is True
    assert broker.features.log.compactor.run_once() == 0  # nothing due until more is appended


def test_bad_input_on_compacted_and_plain_topics_gets_typed_errors(broker):
    """Goal: a record without a key, a key over the limit, CAS on a plain topic or of several records, and key
    reads of a plain topic are refused with their codes, and nothing is appended."""
    broker.create_topic("table", partitions=1, compaction=COMPACT)
    broker.create_topic("plain", partitions=1)
    with pytest.raises(errors.KeyRequired):
        put(broker, "table", [(None, b"x")], sequence=0)
    with pytest.raises(errors.KeyTooLarge):
        put(broker, "table", [(b"k" * 501, b"x")], sequence=0)
    with pytest.raises(errors.NotCompacted):
        put(broker, "plain", [(b"a", b"x")], expected=-1, sequence=0)
    with pytest.raises(errors.InvalidArgument):
        put(broker, "table", [(b"a", b"x"), (b"b", b"y")], expected=-1, sequence=0)
    with pytest.raises(errors.NotCompacted):
        broker.log.get_key("plain", 0, b"a")
    assert broker.replica("table", 0).state_machine.offsets() == (0, 0)
    assert broker.replica("plain", 0).state_machine.offsets() == (0, 0)


def test_compare_and_set_races_have_one_winner(broker):
    """Goal: of many CAS puts expecting the same revision, submitted at once from threads, exactly one holds."""
    broker.create_topic("table", partitions=1, compaction=COMPACT)
    first = put(broker, "table", [(b"lock", b"free")])
    outcomes = []

    def contend(n):
        producer = bytes([n]) * 16
        blob, count, max_ts = encode_stream_batch([(0, b"lock", b"owner-%d" % n, ())])
        future = broker.log.submit_produce("table", 0, producer_id=producer, base_sequence=0, record_count=1,
                                           max_timestamp_ms=max_ts, records=blob,
                                           expected_revision=first.base_offset)
        try:
            outcomes.append(wait_result(future, 5).base_offset)
        except errors.RevisionMismatch:
            outcomes.append("conflict")

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes, key=str).count("conflict") == 7 and len(outcomes) == 8
    assert broker.log.get_key("table", 0, b"lock")[1] == 1


def test_altering_a_topic_to_compact_builds_its_index_first(broker):
    """Goal: a stream topic with records altered to compact answers INDEX_BUILDING until the compactor has indexed
    its records back to the log start, then reads by key; altered back it refuses key reads."""
    broker.create_topic("events", partitions=1)
    for i in range(12):
        put(broker, "events", [(b"k%d" % (i % 3), b"v%d" % i)])
    broker.admin.alter_topic("events", compaction={"cleanup_policy": "compact"})
    with pytest.raises(errors.IndexBuilding):
        broker.log.get_key("events", 0, b"k1")
    for _ in range(20):
        broker.features.log.compactor.run_once()
    assert broker.log.get_key("events", 0, b"k1")[1] == 10
    broker.admin.alter_topic("events", compaction={"cleanup_policy": "delete"})
    with pytest.raises(errors.NotCompacted):
        broker.log.get_key("events", 0, b"k1")
    put(broker, "events", [(None, b"keyless again")])


def test_readers_inside_a_compacted_range_or_below_the_log_start_get_what_kafka_gives(broker):
    """Goal: a read at an offset compaction removed starts at the next surviving record, offsets never change, a
    `compact` topic keeps its old records past retention_ms while `compact,delete` lets retention move the log
    start, and a read below it is OFFSET_OUT_OF_RANGE."""
    for name, policy in (("kept", "compact"), ("trimmed", "compact,delete")):
        broker.create_topic(name, partitions=1, retention_ms=60_000, compaction={**COMPACT, "cleanup_policy": policy})
        broker.sequence = 0  # one producer, a sequence of its own per partition
        for i in range(20):
            put(broker, name, [(b"k%d" % (i % 4), b"v%d" % i)])
        broker.clock.advance(2_000)
        put(broker, name, [(b"late", b"x")])
        assert broker.features.log.compactor.run_once() >= 1
        survivors = [(16, b"k0", b"v16"), (17, b"k1", b"v17"), (18, b"k2", b"v18"), (19, b"k3", b"v19"),
                     (20, b"late", b"x")]
        assert records(broker, name) == survivors
        for offset in (0, 5, 16):
            read = broker.log.fetch(name, 0, offset, max_bytes=1 << 20, max_wait_ms=0)
            assert [r.offset for r in decode_fetched(name, 0, read.batches, offset)][:1] == [16]
        read = broker.log.fetch(name, 0, 18, max_bytes=1 << 20, max_wait_ms=0)
        assert [r.offset for r in decode_fetched(name, 0, read.batches, 18)] == [18, 19, 20]
    broker.clock.advance(61_000)
    put(broker, "trimmed", [(b"after", b"y")], sequence=21)
    put(broker, "kept", [(b"after", b"y")], sequence=21)
    broker.features.log.enforce_retention()
    kept_start, _ = broker.replica("kept", 0).state_machine.offsets()
    trimmed_start, _ = broker.replica("trimmed", 0).state_machine.offsets()
    assert kept_start == 0 and trimmed_start > 0
    with pytest.raises(errors.OffsetOutOfRange):
        broker.log.fetch("trimmed", 0, trimmed_start - 1, max_bytes=1 << 20, max_wait_ms=0)


def test_a_table_just_created_is_read_by_key_before_anything_is_written(broker):
    """Goal: reads by key of a new compacted topic whose partition has not applied the policy yet (no write, no
    compactor check) answer at once, empty, instead of INDEX_BUILDING; the read proposes the policy itself."""
    broker.create_topic("fresh", partitions=1, compaction=COMPACT)
    assert broker.replica("fresh", 0).state_machine.compaction_state().compacted is False
    assert broker.log.get_key("fresh", 0, b"k")[:2] == (False, -1)
    assert broker.log.list_keys("fresh", 0, b"", None, 0)[:2] == ([], False)
    assert broker.replica("fresh", 0).state_machine.compaction_state().compacted is True
    put(broker, "fresh", [(b"k", b"v")])
    assert broker.log.get_key("fresh", 0, b"k")[:2] == (True, 0)
