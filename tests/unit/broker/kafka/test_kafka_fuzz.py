"""Property-based fuzz tests of what the Kafka port decodes (Hypothesis): request frames (header and body, through
the same steps as the router) and record batches (Kafka's RecordBatch v2 and raftbus's own records), mutated from
valid ones or random, give a correct decode or a typed refusal, within memory proportional to their size and the
time bound."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raftbus.broker.kafka.schema import MalformedRequest, make, parse_header, peek_ids, read_body, request_schema
from raftbus.client import kafka_batch, records
from raftbus.client.errors import CorruptBatch
from tests.fuzzing import FUZZ, bounded, mutated
from tests.kafka_wire import request_frame

RECORDS = [(1_700_000_000_000 + i, b"key-%d" % i if i % 2 else None, b"value " * i, [("h", b"v")] if i == 3 else [])
           for i in range(6)]
KAFKA_BATCH = kafka_batch.encode_batch(RECORDS, base_offset=0, producer_id=7, producer_epoch=0, base_sequence=0)
OWN_BATCH = records.encode_batch(RECORDS)[0]
REQUESTS = [
    (18, 3, {}),                                                                    # ApiVersions
    (3, 12, {"topics": [{"name": "orders"}], "allow_auto_topic_creation": False}),  # Metadata
    (0, 9, {"acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": "orders", "partition_data": [{"index": 0, "records": KAFKA_BATCH}]}]}),  # Produce
    (1, 12, {"max_wait_ms": 500, "topics": [{"topic": "orders", "partitions": [
        {"partition": 0, "fetch_offset": 5, "partition_max_bytes": 1 << 20}]}]}),         # Fetch
    (19, 7, {"topics": [{"name": "orders", "num_partitions": 3, "replication_factor": 1}], "timeout_ms": 100}),
    (8, 8, {"group_id": "billing", "topics": [{"name": "orders", "partitions": [
        {"partition_index": 0, "committed_offset": 42}]}]}),                              # OffsetCommit
]


def frame_of(api_key: int, version: int, values: dict) -> bytes:
    return request_frame(api_key, version, 7, make(request_schema(api_key, version), values))[4:]


def decode_request(frame):
    """What the router decodes of one request frame before any handler runs; None for an unknown key."""
    ids = peek_ids(frame)
    if ids is None:
        raise MalformedRequest("no header")
    schema = request_schema(ids[0], ids[1])
    if schema is None:
        return None
    header = parse_header(frame, schema.__header_schema__.__flexible__)
    return read_body(schema, frame, header.body_start)


VALID_FRAMES = [frame_of(*request) for request in REQUESTS]


def test_the_valid_frames_decode():
    """The unmutated frames decode (so the mutations start from requests the port serves)."""
    for frame in VALID_FRAMES:
        assert decode_request(frame) is not None


@FUZZ
@given(st.sampled_from(VALID_FRAMES).flatmap(mutated))
def test_mutated_request_frames_decode_or_are_malformed(frame):
    """A mutated request frame decodes to its entity or raises MalformedRequest (CorruptBatch for a produce
    batch), within the bounds."""
    bounded(decode_request, frame, (MalformedRequest, CorruptBatch))


@FUZZ
@given(st.binary(min_size=8, max_size=200))
def test_random_request_frames_decode_or_are_malformed(frame):
    """Random bytes as a request frame decode or raise MalformedRequest, within the bounds."""
    bounded(decode_request, frame, (MalformedRequest, CorruptBatch))


@FUZZ
@given(mutated(KAFKA_BATCH))
def test_mutated_kafka_record_batches_decode_or_are_corrupt(blob):
    """A mutated RecordBatch v2 passes the broker's check and decodes to the original records, or is
    CorruptBatch (the CRC-32C covers every byte after it), within the bounds."""
    header = bounded(lambda b: kafka_batch.check_batch(b, 1 << 20), blob, (CorruptBatch,))
    decoded = bounded(lambda b: kafka_batch.decode_batch(b, decompressed_bytes_max=1 << 20), blob, (CorruptBatch,))
    if not isinstance(header, CorruptBatch):
        assert [(r.timestamp_ms, r.key, r.value) for r in decoded] == [(t, k, v) for t, k, v, _ in RECORDS]


@FUZZ
@given(st.one_of(mutated(OWN_BATCH), st.binary(max_size=200)), st.integers(1, 8))
def test_mutated_own_record_batches_frame_and_decode_or_are_corrupt(blob, record_count):
    """raftbus's own record format: the broker's framing check and the SDK's decoder accept a batch or raise
    CorruptBatch, within the bounds, and a batch the framing check accepts decodes to that many records."""
    framed = bounded(lambda b: records.check_framing(b, record_count), blob, (CorruptBatch,))
    decoded = bounded(records.decode_batch, blob, (CorruptBatch,))
    if not isinstance(framed, CorruptBatch):
        assert not isinstance(decoded, CorruptBatch) and len(decoded) == record_count
