"""Goal: fetched buffers become Arrow columns (fixed-stride numpy path and general path alike) that hold
exactly what records.decode_fetched decodes, in the schema PySpark checks."""
import random
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from raftbus.client import kafka_batch
from raftbus.client.errors import CorruptBatch
from raftbus.client.records import (
    decode_fetched,
    encode_batch,
    encode_stored_batch,
    encode_stream_batch,
    iter_stored_batches,
)
from raftbus.client.spark.columns import (
    _kafka_piece,
    _uniform_piece,
    arrow_schema,
    batch_pieces,
    spark_schema,
    to_record_batch,
    to_rows,
)

TOPIC, PARTITION = "orders", 4


def stored(base_offset: int, records: list) -> bytes:
    blob, count, max_ts = encode_batch(records)
    return encode_stored_batch(base_offset, count, 1, max_ts, blob)


def uniform(n: int, ts0: int, key_len: int, value_len: int) -> list:
    key = None if key_len < 0 else b"k" * key_len
    return [(ts0 + i, key, bytes([i % 256]) * value_len if value_len >= 0 else None, ()) for i in range(n)]


def mixed(rng: random.Random, n: int) -> list:
    def field():
        return rng.choice([None, b"", bytes(rng.randrange(256) for _ in range(rng.randint(1, 20)))])
    return [(rng.randint(0, 2**41), field(), field(),
             tuple((f"h{j}", field()) for j in range(rng.choice([0, 0, 1, 3])))) for _ in range(n)]


def fetched_buffer(rng: random.Random) -> bytes:
    """Stored batches back to back: uniform ones (all key/value shapes) and mixed ones."""
    shapes = [(-1, 100), (0, 0), (3, -1), (8, 17), (-1, -1)]
    parts, base = [], 0
    for i in range(12):
        n = rng.randint(1, 40)
        records = uniform(n, 1_700_000_000_000, *shapes[i % len(shapes)]) if i % 2 == 0 else mixed(rng, n)
        parts.append(stored(base, records))
        base += n
    return b"".join(parts)


def expected_rows(buf: bytes, lo: int, hi: int, headers: bool) -> list[dict]:
    rows = []
    for r in decode_fetched(TOPIC, PARTITION, buf, lo):
        if r.offset >= hi:
            break
        row = {"key": r.key, "value": r.value, "topic": TOPIC, "partition": PARTITION, "offset": r.offset,
               "timestamp": datetime.fromtimestamp(r.timestamp_ms / 1000, timezone.utc), "timestampType": 0}
        if headers:
            row["headers"] = [{"key": k, "value": v} for k, v in r.headers] or None
        rows.append(row)
    return rows


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_record_batch_matches_the_record_decoder(seed, headers):
    rng = random.Random(seed)
    buf = fetched_buffer(rng)
    total = sum(1 for _ in decode_fetched(TOPIC, PARTITION, buf))
    lo, hi = sorted(rng.sample(range(total + 1), 2))
    schema = arrow_schema(headers)
    pieces = list(batch_pieces(buf, lo, hi, headers))
    batch = to_record_batch(TOPIC, PARTITION, pieces, schema)
    assert batch.schema.equals(schema)
    assert batch.to_pylist() == expected_rows(buf, lo, hi, headers)


@pytest.mark.parametrize("headers", [False, True])
def test_tuples_hold_the_same_records_in_schema_order(headers):
    buf = fetched_buffer(random.Random(99))
    pieces = list(batch_pieces(buf, 3, 200, headers))
    names = spark_schema(headers).fieldNames()
    rows = [dict(zip(names, row)) for row in to_rows(TOPIC, PARTITION, pieces, headers)]
    for row in rows:
        if headers and row["headers"] is not None:
            row["headers"] = [{"key": k, "value": v} for k, v in row["headers"]]
    assert rows == expected_rows(buf, 3, 200, headers)


def test_a_uniform_looking_batch_with_one_odd_record_takes_the_general_path():
    # Same total length as 3 records of (key 2, value 2), but the lengths move inside: the stride check sees it.
    records = [(1, b"ab", b"cd", ()), (2, b"abc", b"d", ()), (3, b"a", b"bcd", ())]
    buf = stored(0, records)
    assert _uniform_piece(next(iter_stored_batches(buf)), 0, 3, False) is None
    batch = to_record_batch(TOPIC, PARTITION, list(batch_pieces(buf, 0, 3, False)), arrow_schema(False))
    assert batch.column("key").to_pylist() == [b"ab", b"abc", b"a"]
    assert batch.column("value").to_pylist() == [b"cd", b"d", b"bcd"]


def test_a_record_count_that_disagrees_with_the_blob_is_corrupt():
    blob, _, _ = encode_batch(mixed(random.Random(1), 3))
    buf = encode_stored_batch(0, 5, 1, 1, blob)
    with pytest.raises(CorruptBatch):
        list(batch_pieces(buf, 0, 5, False))


def test_producer_shaped_batches_take_the_fixed_stride_path():
    batch = next(iter_stored_batches(stored(10, uniform(50_000, 5, -1, 100))))
    piece = _uniform_piece(batch, 5, 50_000, True)
    assert piece is not None and piece.first_offset == 15 and len(piece) == 49_995
    assert piece.keys.null_count == 49_995 and isinstance(piece.values, pa.BinaryArray)
    assert piece.headers == [()] * 49_995


def kafka_stored(base_offset: int, records: list, log_append_time_ms: int | None = None) -> bytes:
    if log_append_time_ms is None:
        blob, count, max_ts = encode_stream_batch(records)
    else:
        blob = kafka_batch.encode_batch(records, log_append_time_ms=log_append_time_ms)
        count, max_ts = len(records), log_append_time_ms
    return encode_stored_batch(base_offset, count, 1, max_ts, blob)


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_kafka_batches_match_the_record_decoder(seed, headers):
    """Goal: Kafka batches (uniform, mixed, LogAppendTime, across offset deltas of 1 to 3 varint bytes) become the
    same columns as the record decoder gives."""
    rng = random.Random(seed)
    shapes = [(-1, 100), (0, 0), (3, -1), (8, 17), (-1, -1)]
    parts, base = [], 0
    for i in range(10):
        n = rng.choice([1, 9, 70, 300, 9000]) if i % 2 == 0 else rng.randint(1, 40)
        records = uniform(n, 1_700_000_000_000, *shapes[i % len(shapes)]) if i % 2 == 0 else mixed(rng, n)
        parts.append(kafka_stored(base, records, 1_800_000_000_000 if i == 4 else None))
        base += n
    buf = b"".join(parts)
    lo, hi = sorted(rng.sample(range(base + 1), 2))
    batch = to_record_batch(TOPIC, PARTITION, list(batch_pieces(buf, lo, hi, headers)), arrow_schema(headers))
    assert batch.to_pylist() == expected_rows(buf, lo, hi, headers)


def test_producer_shaped_kafka_batches_take_the_strided_path():
    """Goal: a producer's Kafka batch of fixed-size records (offset deltas up to three varint bytes) is decoded run
    by run, with no record read by itself."""
    batch = next(iter_stored_batches(kafka_stored(10, uniform(10_000, 5, -1, 100))))
    piece = _kafka_piece(batch, 5, 10_000, True)
    assert piece is not None and piece.first_offset == 15 and len(piece) == 9_995
    assert piece.keys.null_count == 9_995 and piece.values.to_pylist()[:2] == [bytes([5]) * 100, bytes([6]) * 100]
    assert piece.timestamps_ms[0] == 10 and piece.timestamps_ms[-1] == 5 + 9_999


def test_a_compacted_batch_keeps_its_records_offsets_and_gaps():
    """Goal: a compacted Kafka batch (fewer records than its offsets span) gives each record its own offset in
    Arrow and row form, within [from_offset, until_offset), and the batch after it follows its span."""
    records = [(1_000 + i, b"k%d" % (i % 3), b"v%d" % i, ()) for i in range(8)]
    blob, count, max_ts = encode_stream_batch(records)
    kept = kafka_batch.retain_records(blob, {2, 5, 7})
    buf = encode_stored_batch(10, count, 1, max_ts, kept) + stored(18, uniform(2, 5, 1, 4))
    pieces = list(batch_pieces(buf, 13, 19, want_headers=True))
    batch = to_record_batch(TOPIC, PARTITION, pieces, arrow_schema(True))
    assert batch.column("offset").to_pylist() == [15, 17, 18]
    assert batch.column("value").to_pylist() == [b"v5", b"v7", bytes([0]) * 4]
    assert [row[4] for row in to_rows(TOPIC, PARTITION, pieces, True)] == [15, 17, 18]
    expected = [(r.offset, r.value) for r in decode_fetched(TOPIC, PARTITION, buf, 13) if r.offset < 19]
    assert expected == list(zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist()))
