"""Goal: the record batch and stored-batch codecs round-trip every field shape and reject garbled input."""
import random
import struct

import pytest

from raftbus.client import records as R
from raftbus.client.errors import CorruptBatch
from raftbus.client.records import (
    Record,
    append_record,
    decode_batch,
    decode_fetched,
    encode_batch,
    encode_stored_batch,
    iter_stored_batches,
    record_size,
    decode_columns,
    uniform_record_shape,
)


def test_round_trip_of_every_field_shape():
    records = [
        (1, None, None, ()),
        (2, b"k", b"", ()),
        (3, b"", b"v", (("h", b"x"), ("none", None), ("empty", b""))),
        (4, "clé-ü".encode(), "välue ✓".encode(), (("ünï", "✓".encode()),)),
    ]
    blob, count, max_ts = encode_batch(records)
    assert (count, max_ts) == (4, 4)
    assert decode_batch(blob) == records
    assert len(blob) == sum(record_size(k, v, h) for _, k, v, h in records)


def test_headers_none_and_empty_encode_the_same():
    assert encode_batch([(5, b"k", b"v", None)]) == encode_batch([(5, b"k", b"v", ())])


def test_large_batch_round_trips():
    records = [(1_700_000_000_000 + i, str(i).encode(), bytes(100), ()) for i in range(20_000)]
    blob, count, max_ts = encode_batch(records)
    assert count == 20_000 and max_ts == records[-1][0]
    assert decode_batch(memoryview(blob)) == records


def test_empty_batch_encodes_to_nothing():
    assert encode_batch([]) == (b"", 0, -1)
    assert decode_batch(b"") == []


def _stored(base_offset, records, append_ms=99):
    blob, count, max_ts = encode_batch(records)
    return encode_stored_batch(base_offset, count, append_ms, max_ts, blob)


def test_iter_stored_batches_yields_headers_and_raw_blobs():
    first = [(10, None, b"a", ()), (11, None, b"b", ())]
    second = [(12, b"k", b"c", ())]
    buf = _stored(0, first) + _stored(2, second, append_ms=100)
    batches = list(iter_stored_batches(buf))
    assert [(b.base_offset, b.record_count, b.append_time_ms, b.max_timestamp_ms) for b in batches] == [
        (0, 2, 99, 11),
        (2, 1, 100, 12),
    ]
    assert bytes(batches[1].blob) == encode_batch(second)[0]


def test_decode_fetched_numbers_offsets_and_skips_below_from_offset():
    buf = _stored(100, [(1, None, b"a", ()), (2, None, b"b", ()), (3, None, b"c", ())]) + _stored(
        103, [(4, b"k", b"d", (("h", b"1"),))]
    )
    records = list(decode_fetched("t", 2, buf, from_offset=101))
    assert [r.offset for r in records] == [101, 102, 103]
    assert records[-1] == Record("t", 2, 103, b"k", b"d", (("h", b"1"),), 4)
    assert [r.offset for r in decode_fetched("t", 2, buf, from_offset=103)] == [103]
    assert list(decode_fetched("t", 2, buf, from_offset=104)) == []


@pytest.mark.parametrize("cut", [1, 5, 12, 20])
def test_truncated_record_batch_raises_corrupt_batch(cut):
    blob, _, _ = encode_batch([(1, b"key", b"value", (("h", b"x"),))])
    with pytest.raises(CorruptBatch):
        decode_batch(blob[:-cut])


def test_garbled_length_raises_corrupt_batch():
    with pytest.raises(CorruptBatch):
        decode_batch(struct.pack(">qi", 1, 1_000_000) + b"short")
    with pytest.raises(CorruptBatch):
        decode_batch(struct.pack(">qi", 1, -7))


def test_truncated_stored_batch_raises_corrupt_batch():
    buf = _stored(0, [(1, None, b"abc", ())])
    with pytest.raises(CorruptBatch):
        list(iter_stored_batches(buf[:-1]))
    with pytest.raises(CorruptBatch):
        list(iter_stored_batches(buf + b"\x00\x01"))


def test_record_count_mismatch_raises_corrupt_batch():
    blob, _, max_ts = encode_batch([(1, None, b"a", ())])
    with pytest.raises(CorruptBatch):
        list(decode_fetched("t", 0, encode_stored_batch(0, 2, 0, max_ts, blob)))


def test_columnar_decode_matches_the_tuple_decode():
    records = [(1, None, None, ()), (2, b"k", b"", ()), (3, b"", b"v", (("h", b"x"), ("none", None))),
               (4, "clé".encode(), bytes(300), ())]
    blob, _, _ = encode_batch(records)
    columns = decode_columns(blob)
    assert list(zip(columns.timestamps_ms, columns.keys, columns.values, columns.headers)) == decode_batch(blob)


def test_columnar_decode_rejects_garbled_input():
    blob, _, _ = encode_batch([(1, b"key", b"value", ())])
    with pytest.raises(CorruptBatch):
        decode_columns(blob[:-3])
    with pytest.raises(CorruptBatch):
        decode_columns(blob[:8] + struct.pack(">i", 1000) + blob[12:])


def test_uniform_record_shape_is_a_candidate_test_on_the_first_record():
    same, _, _ = encode_batch([(i, None, b"abc", ()) for i in range(4)])
    assert uniform_record_shape(same, 4) == (-1, 3)
    assert uniform_record_shape(same, 3) is None
    with_headers, _, _ = encode_batch([(i, b"k", b"v", (("h", b"x"),)) for i in range(2)])
    assert uniform_record_shape(with_headers, 2) is None
    assert uniform_record_shape(b"", 0) is None


def test_append_record_writes_what_encode_batch_writes():
    records = [
        (1, None, None, ()),
        (2, None, b"v" * 100, ()),
        (3, b"k", b"", ()),
        (4, b"", None, (("h", b"x"), ("none", None))),
        (5, None, b"v", (("h", b""),)),
    ]
    buffer = bytearray()
    for ts, key, value, headers in records:
        append_record(buffer, ts, key, value, headers)
    assert bytes(buffer) == encode_batch(records)[0]
    assert decode_batch(buffer) == records


def _stored_batch(base_offset: int, records: list) -> R.StoredBatch:
    blob, count, _ = R.encode_batch(records)
    return R.StoredBatch(base_offset, count, 0, 0, memoryview(blob))


@pytest.mark.parametrize("seed", range(40))
def test_uniform_batches_decode_as_record_by_record_does(seed):
    """Goal: a batch of one shape (fixed key and value lengths or None, no headers) takes the one-struct path and
    gives exactly the Records the record-by-record path gives, from any offset; a batch of mixed shapes, with
    headers, or of one record gives the same Records too."""
    rng = random.Random(seed)
    count = rng.choice([1, 2, 3, 50, 257])
    key_len = rng.choice([None, 0, 1, 8])
    value_len = rng.choice([None, 0, 7, 100])
    records = [(rng.randrange(1 << 40), None if key_len is None else rng.randbytes(key_len),
                None if value_len is None else rng.randbytes(value_len), ()) for _ in range(count)]
    if seed % 4 == 3:  # one record of another shape or with a header: not uniform
        i = rng.randrange(count)
        ts, key, value, _ = records[i]
        records[i] = (ts, key, value, (("h", b"v"),)) if seed % 8 == 3 else (ts, key, (value or b"") + b"x", ())
    batch = _stored_batch(1_000, records)
    data = bytes(batch.blob)
    uniform = seed % 4 != 3 or count == 1 and seed % 8 != 3
    assert (R._uniform_shape(data, count) is not None) == uniform
    for from_offset in (0, 999, 1_000, 1_001, 1_000 + count // 2, 1_000 + count, 5_000):
        expected = R._decode_records("t", 4, batch, data, from_offset)
        assert R.decode_stored_batch("t", 4, batch, from_offset) == expected
        assert [r.offset for r in expected] == list(range(max(from_offset, 1_000), 1_000 + count))
        assert [(r.timestamp_ms, r.key, r.value, r.headers) for r in expected] == \
            [(ts, key, value, headers or ()) for ts, key, value, headers in records[max(from_offset - 1_000, 0):]]


def test_a_batch_that_looks_uniform_but_is_not_is_decoded_record_by_record():
    """Goal: the first record's shape and the blob's length fit one shape, but a later record's key and value
    lengths differ (they still add up): the batch is not taken as uniform, and decodes to its true records."""
    records = [(1, b"ab", b"cdef", ()), (2, b"abc", b"def", ()), (3, b"a", b"bcdef", ()), (4, b"ab", b"cdef", ())]
    batch = _stored_batch(0, records)
    data = bytes(batch.blob)
    assert R.uniform_record_shape(data, 4) == (2, 4)
    assert R._uniform_shape(data, 4) is None
    decoded = R.decode_stored_batch("t", 0, batch)
    assert [(r.key, r.value) for r in decoded] == [(k, v) for _, k, v, _ in records]


def test_a_uniform_batch_with_a_wrong_record_count_is_corrupt():
    """Goal: a batch whose header claims fewer records than its uniform blob holds is corrupt, as it was."""
    blob, _, _ = R.encode_batch([(i, None, b"v" * 10, ()) for i in range(6)])
    with pytest.raises(CorruptBatch):
        R.decode_stored_batch("t", 0, R.StoredBatch(0, 5, 0, 0, memoryview(blob)))


@pytest.mark.parametrize("seed", range(6))
def test_stream_batches_decode_to_the_records_of_their_kafka_rows_from_any_offset(seed):
    """Goal: a stream batch (Kafka's format, what the SDK and Kafka clients write) decodes to Records whose offset,
    timestamp, key, value and headers are its Kafka rows', from any offset, whether its records form runs of one
    layout (decoded as columns) or not (a header, another length, timestamps that differ)."""
    from raftbus.client import kafka_batch as K

    rng = random.Random(seed)
    count = rng.choice([1, 9, 200, 1_000])
    rows = [(1_700_000_000_000 + (rng.randrange(3) if seed % 2 else 0), None if seed % 3 else b"key",
             rng.randbytes(100), ()) for _ in range(count)]
    if seed % 3 == 2:
        rows[count // 2] = (rows[count // 2][0], b"other-key", b"x", (("h", b"1"),))
    blob, _, max_ts = R.encode_stream_batch(rows)
    batch = next(iter_stored_batches(R.encode_stored_batch(500, count, 1, max_ts, blob)))
    expected = [Record("t", 3, 500 + r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in K.decode_batch(blob)]
    for from_offset in (0, 500, 501, 500 + count // 2, 500 + count):
        assert R.decode_stored_batch("t", 3, batch, from_offset) == [r for r in expected if r.offset >= from_offset]


@pytest.mark.parametrize("seed", range(8))
def test_iter_stored_batch_gives_decode_stored_batchs_records_between_the_offsets(seed):
    """Goal: the lazy decode the consumer iterates gives exactly decode_stored_batch's Records at or above
    from_offset and below end_offset, for stream (Kafka) batches with and without runs and for raftbus batches."""
    from raftbus.client import kafka_batch as K

    rng = random.Random(seed)
    count = rng.choice([1, 9, 300])
    rows = [(1_700_000_000_000 + (rng.randrange(3) if seed % 2 else 0), None, rng.randbytes(100), ())
            for _ in range(count)]
    if seed % 4 == 3:
        rows[count // 2] = (rows[count // 2][0], b"k", b"x", (("h", b"1"),))
    if seed % 4 == 2:
        blob = encode_batch(rows)[0]  # raftbus's own format
    else:
        blob = R.encode_stream_batch(rows)[0]
        assert K.is_kafka_batch(blob)
    batch = next(iter_stored_batches(R.encode_stored_batch(700, count, 1, 2, blob)))
    every = R.decode_stored_batch("t", 1, batch)
    for from_offset, end_offset in [(0, None), (700, 700 + count), (701, None), (0, 700 + count // 2),
                                    (700 + count // 3, 700 + count - 1), (700 + count, None), (0, 700)]:
        expected = [r for r in every if r.offset >= from_offset and (end_offset is None or r.offset < end_offset)]
        assert list(R.iter_stored_batch("t", 1, batch, from_offset, end_offset)) == expected


def test_iter_stored_batch_refuses_a_corrupt_batch_before_giving_a_record():
    blob = bytearray(R.encode_stream_batch([(1, None, b"v" * 10, ())] * 20)[0])
    blob[57:61] = struct.pack(">i", 21)  # the Kafka header's record count says one more record than it holds
    batch = next(iter_stored_batches(R.encode_stored_batch(0, 20, 1, 1, bytes(blob))))
    with pytest.raises(CorruptBatch):
        R.iter_stored_batch("t", 0, batch)
