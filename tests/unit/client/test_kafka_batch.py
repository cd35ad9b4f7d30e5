"""Goal: Kafka's RecordBatch v2 codec round-trips records exactly (every codec, keys, nulls, headers, timestamps),
and refuses every batch that is not exactly what it claims (CRC, length, magic, count, compression, size bound)."""
import gzip
import random

import pytest

from raftbus.client import kafka_batch as K
from raftbus.client.errors import CorruptBatch
from raftbus.client.records import check_framing, encode_batch as raftbus_encode

RECORDS = [
    (1_700_000_000_000, b"k1", b"v1", (("h", b"x"),)),
    (1_700_000_000_005, None, b"v2", ()),
    (1_700_000_000_003, b"k3", None, (("a", None), ("b", b""))),
    (1_700_000_000_200, b"", b"x" * 300, ()),
]


@pytest.mark.parametrize("codec", sorted(K.CODECS))
def test_round_trip_every_codec(codec):
    """Goal: what is encoded with any codec decodes to the same offsets, keys, values, headers and timestamps."""
    blob = K.encode_batch(RECORDS, base_offset=40, compression=K.CODECS[codec])
    header = K.check_batch(blob, 1 << 20)
    assert (header.record_count, header.compression, header.max_timestamp) == (4, K.CODECS[codec], 1_700_000_000_200)
    decoded = K.decode_batch(blob)
    assert [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in decoded] == [
        (40 + i, ts, key, value, tuple(headers)) for i, (ts, key, value, headers) in enumerate(RECORDS)]
    assert [r.offset for r in K.decode_batch(blob, base_offset=7)] == [7, 8, 9, 10]


def test_many_records_cross_varint_sizes():
    """Goal: offset deltas and timestamps past one varint byte (64+) encode and decode."""
    records = [(1000 + 70 * i, str(i).encode(), b"v" * (i % 200), ()) for i in range(300)]
    blob = K.encode_batch(records)
    K.check_batch(blob, 1 << 20)
    assert [(r.offset, r.timestamp_ms, r.key) for r in K.decode_batch(blob)] == [
        (i, 1000 + 70 * i, str(i).encode()) for i in range(300)]


def test_the_varint_table_holds_each_value_encoded():
    """VARINTS, built by encoded length, is what encoding each value one by one gives, across every length's edge."""
    assert len(K.VARINTS) == K.VARINT_TABLE_SIZE
    assert K.VARINTS == [K._varint(n) for n in range(K.VARINT_TABLE_SIZE)]
    assert [len(K.VARINTS[n]) for n in (63, 64, 8191, 8192)] == [1, 2, 2, 3]


def test_log_append_time_rewrites_the_header_and_keeps_the_crc_valid():
    """Goal: a LogAppendTime batch passes its CRC and gives every record the append time."""
    blob = K.with_log_append_time(K.encode_batch(RECORDS), 1_800_000_000_000)
    header = K.check_batch(blob, 1 << 20)
    assert header.log_append_time and header.max_timestamp == 1_800_000_000_000
    assert {r.timestamp_ms for r in K.decode_batch(blob)} == {1_800_000_000_000}


def test_base_offset_is_outside_the_crc():
    """Goal: replacing the first 8 bytes (what the broker does on fetch) leaves a valid batch."""
    blob = K.encode_batch(RECORDS)
    moved = K.base_offset_bytes(123) + blob[8:]
    assert K.check_batch(moved, 1 << 20).base_offset == 123


def _flip(blob: bytes, at: int) -> bytes:
    return blob[:at] + bytes([blob[at] ^ 0xFF]) + blob[at + 1:]


@pytest.mark.parametrize("what,blob", [
    ("crc of a record byte", _flip(K.encode_batch(RECORDS), K.HEADER_BYTES + 3)),
    ("crc field", _flip(K.encode_batch(RECORDS), 18)),
    ("magic", _flip(K.encode_batch(RECORDS), 16)),
    ("truncated", K.encode_batch(RECORDS)[:-1]),
    ("short", b"\x00" * 20),
])
def test_bad_batches_are_refused(what, blob):
    """Goal: a changed, truncated or foreign batch is CorruptBatch, never decoded."""
    with pytest.raises(CorruptBatch):
        K.check_batch(blob, 1 << 20)


def _resealed(records_section: bytes, count: int, codec: int = K.NONE) -> bytes:
    return K.seal(0, codec, count, 0, 0, records_section)


def test_record_count_must_match_the_records():
    """Goal: a batch whose header claims more or fewer records than it frames is refused."""
    body = b"".join(K.encode_record(i, 0, None, b"v") for i in range(3))
    K.check_batch(_resealed(body, 3), 1 << 20)
    for claimed in (2, 4):
        with pytest.raises(CorruptBatch):
            K.check_batch(_resealed(body, claimed), 1 << 20)
    with pytest.raises(CorruptBatch):  # a record length running past the end
        K.check_batch(_resealed(body + b"\x7e", 4), 1 << 20)


def test_decompression_is_bounded():
    """Goal: a batch that would inflate past the bound is refused without inflating it whole (a zip bomb)."""
    for codec in (K.GZIP, K.SNAPPY, K.LZ4, K.ZSTD):
        big = b"".join(K.encode_record(i, 0, None, b"\x00" * 60_000) for i in range(50))  # 3 MB of zeros
        blob = _resealed(K.compress(codec, big), 50, codec)
        assert len(blob) < 300_000
        assert K.check_batch(blob, 4 << 20).record_count == 50
        with pytest.raises(CorruptBatch, match="more than"):
            K.check_batch(blob, 1 << 20)


@pytest.mark.parametrize("codec", [K.GZIP, K.SNAPPY, K.LZ4, K.ZSTD, 5, 6])
def test_garbage_that_does_not_decompress_is_refused(codec):
    """Goal: compressed records that do not decompress (or an unknown codec) are CorruptBatch."""
    with pytest.raises(CorruptBatch):
        K.check_batch(_resealed(b"\x01\x02garbage" * 10, 1, codec), 1 << 20)


def test_gzip_from_another_writer_and_raw_snappy_decompress():
    """Goal: gzip from Python's gzip module and raw (unframed) snappy, as librdkafka writes it, are read."""
    body = K.encode_record(0, 0, b"k", b"v")
    assert K.decode_batch(_resealed(gzip.compress(body), 1, K.GZIP))[0].value == b"v"
    import cramjam
    assert K.decode_batch(_resealed(bytes(cramjam.snappy.compress_raw(body)), 1, K.SNAPPY))[0].key == b"k"


def test_raftbus_blobs_are_never_taken_for_kafka_batches():
    """Goal: the format test is exact: raftbus's own well-framed batches never pass it, Kafka batches always do."""
    rng = random.Random(7)
    for _ in range(2000):
        records = [(rng.randrange(0, 2**40), rng.choice([None, rng.randbytes(rng.randrange(0, 80))]),
                    rng.choice([None, rng.randbytes(rng.randrange(0, 200))]), ())
                   for _ in range(rng.randrange(1, 5))]
        blob, _, _ = raftbus_encode(records)
        assert not K.is_kafka_batch(blob)
        assert K.is_kafka_batch(K.encode_batch(records))


def test_check_framing_takes_either_format():
    """Goal: the broker's produce check accepts one Kafka batch, with its own count, and refuses a wrong count."""
    blob = K.encode_batch(RECORDS, compression=K.ZSTD)
    check_framing(blob, 4)
    with pytest.raises(CorruptBatch):
        check_framing(blob, 3)
    with pytest.raises(CorruptBatch):
        check_framing(_flip(blob, 40), 4)


def test_keyless_fast_record_is_encode_record():
    """Goal: the producers' table-lookup encoding of the common record is byte for byte encode_record's."""
    for offset_delta, ts_delta, size in [(0, 0, 0), (63, 63, 100), (64, 64, 127), (8191, 8191, 7999), (9000, 20000, 10),
                                          (5, -3, 100), (20000, 1, 8000)]:
        value = b"v" * size
        assert K.keyless_record(offset_delta, ts_delta, value) == K.encode_record(offset_delta, ts_delta, None, value)


def test_uniform_runs_decode_like_record_by_record():
    """Goal: records decoded a run at a time (struct over runs of one layout) equal the record-by-record decode,
    whatever mix of keys, nulls, headers, lengths and timestamps a batch holds."""
    rng = random.Random(11)
    for trial in range(300):
        kind = rng.randrange(5)
        rows = []
        for i in range(rng.randrange(1, 300)):
            ts = 1_700_000_000_000 + (i * rng.choice([0, 1, 3, 100]) if kind else rng.randrange(-5, 10_000))
            key = None if kind in (0, 1) else (b"k" * rng.choice([3, 3, 70]) if kind == 4 else b"kk")
            value = (b"v" * (100 if kind else rng.randrange(0, 300))) if rng.random() > 0.02 else None
            headers = (("h", b"x"),) if kind == 0 and rng.random() < 0.1 else ()
            rows.append((ts, key, value, headers))
        blob = K.encode_batch(rows, base_offset=rng.randrange(1000))
        header = K.read_header(blob)
        one_by_one, pos, data = [], 0, blob[K.HEADER_BYTES:]
        while pos < len(data):
            pos = K._decode_one(data, pos, header.base_offset, header.base_timestamp, None, one_by_one)
        assert [tuple(r) for r in K.decode_batch(blob)] == one_by_one, trial
        assert [(r.timestamp_ms, r.key, r.value, r.headers) for r in K.decode_batch(blob)] == rows, trial


@pytest.mark.parametrize("deltas", [
    list(range(40)),                              # a producer's offsets: one range
    list(range(5, 60)),                           # consecutive from a later first delta
    [*range(50), *range(14, 64)],                 # consecutive runs, then back: equal bytes at the boundary
    list(range(0, 120, 2)),                       # gaps
    list(range(64, 300)),                         # two-byte varints, consecutive
    [*range(60, 64), *range(64, 80)],             # the one- to two-byte boundary inside a run
    [3] * 20,                                     # repeated (garbled) deltas
])
def test_offset_deltas_of_uniform_runs_decode_as_written(deltas):
    """Goal: the consecutive-offsets short cut of uniform runs takes only deltas that are one range; any other
    deltas of runs of one layout decode as they were written, as the record-by-record decode reads them."""
    data = b"".join(K.encode_record(delta, 7, None, b"v" * 10) for delta in deltas)
    one_by_one, pos = [], 0
    while pos < len(data):
        pos = K._decode_one(data, pos, 1000, 1_700_000_000_000, None, one_by_one)
    rows = K.decode_rows(data, 1000, 1_700_000_000_000, None)
    assert rows == one_by_one and [offset for offset, *_ in rows] == [1000 + d for d in deltas]
