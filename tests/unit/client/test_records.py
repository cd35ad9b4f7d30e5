"""Goal: the record batch and stored-batch codecs round-trip every field shape and reject garbled input."""
import struct

import pytest

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
