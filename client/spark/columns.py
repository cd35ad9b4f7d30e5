"""Kafka's columns for raftbus records, and fetched buffers turned into Arrow record batches.

The schema is Kafka's: key, value (binary), topic (string), partition (int), offset (long), timestamp,
timestampType (int; 0 = CreateTime, the producer's record timestamp), plus headers
(array<struct<key: string, value: binary>>) with includeHeaders.

A fetched buffer becomes one Arrow record batch per fetch. Stored batches whose records all have the same
key and value lengths and no headers (what most producers write) are decoded with numpy over the whole
batch at once: the fixed stride is first checked at every record, then timestamps, keys and values are
sliced out as strided views. Kafka batches (what the SDK's producers and Kafka clients write) are decoded
the same way run by run: records of one layout in a row (client/kafka_batch.py's uniform_layouts) as strided
views, their timestamps from the strided delta varints. Any other batch goes through records.decode_columns
(one Python pass, no per-record tuple). Either way the result equals records.decode_fetched, column by column.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from raftbus.client.errors import CorruptBatch
from raftbus.client import kafka_batch
from raftbus.client.records import (
    RECORD_OVERHEAD_BYTES,
    StoredBatch,
    decode_columns,
    decode_stored_batch,
    iter_stored_batches,
    uniform_record_shape,
)

CREATE_TIME = 0  # Kafka's timestampType for a record timestamp set by the producer
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

HEADER_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
BASE_FIELDS = (
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
)


def spark_schema(include_headers: bool) -> StructType:
    """Kafka's source schema, with the headers column when `include_headers`."""
    fields = list(BASE_FIELDS)
    if include_headers:
        fields.append(StructField("headers", HEADER_TYPE))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema PySpark expects from read() for spark_schema (it checks equality)."""
    return to_arrow_schema(spark_schema(include_headers), timezone="UTC")


# ---------------------------------------------------------------------- one stored batch → columns

class BatchPiece:
    """Arrow columns for the records of one stored batch between two offsets; `offsets` is None when they run on
    from `first_offset` one by one, else each record's offset (a compacted batch, whose records have gaps)."""

    __slots__ = ("first_offset", "timestamps_ms", "keys", "values", "headers", "offsets")

    def __init__(self, first_offset: int, timestamps_ms: np.ndarray, keys: pa.Array, values: pa.Array,
                 headers: list | None, offsets: np.ndarray | None = None):
        self.first_offset = first_offset
        self.timestamps_ms = timestamps_ms
        self.keys = keys
        self.values = values
        self.headers = headers  # list of header tuples, or None when headers are not wanted
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.timestamps_ms)

    def offset_column(self) -> np.ndarray:
        if self.offsets is not None:
            return self.offsets
        return np.arange(self.first_offset, self.first_offset + len(self), dtype=np.int64)


def _binary_column(rows: np.ndarray, start: int, length: int) -> pa.Array:
    """Bytes [start, start+length) of every row as a binary array (all null when length is -1)."""
    count = rows.shape[0]
    if length < 0:
        return pa.nulls(count, pa.binary())
    data = np.ascontiguousarray(rows[:, start : start + length])
    offsets = np.arange(0, (count + 1) * length, length, dtype=np.int32) if length else np.zeros(count + 1, np.int32)
    return pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _uniform_piece(batch: StoredBatch, lo: int, hi: int, want_headers: bool) -> BatchPiece | None:
    """The fixed-stride fast path; None when the batch is not uniform (checked at every record)."""
    shape = uniform_record_shape(batch.blob, batch.record_count)
    if shape is None:
        return None
    key_len, value_len = shape
    key_bytes, value_bytes = max(key_len, 0), max(value_len, 0)
    stride = RECORD_OVERHEAD_BYTES + key_bytes + value_bytes
    rows = np.frombuffer(batch.blob, dtype=np.uint8).reshape(batch.record_count, stride)
    value_len_at = 12 + key_bytes
    header_count_at = value_len_at + 4 + value_bytes
    lengths = np.concatenate([rows[:, 8:12], rows[:, value_len_at : value_len_at + 4],
                              rows[:, header_count_at : header_count_at + 2]], axis=1)
    if not (lengths == lengths[0]).all():
        return None
    rows = rows[lo:hi]
    timestamps_ms = np.ascontiguousarray(rows[:, 0:8]).view(">i8").reshape(-1).astype(np.int64)
    keys = _binary_column(rows, 12, key_len)
    values = _binary_column(rows, value_len_at + 4, value_len)
    headers = [()] * (hi - lo) if want_headers else None
    return BatchPiece(batch.base_offset + lo, timestamps_ms, keys, values, headers)


def _zigzag(rows: np.ndarray, at: int, size: int) -> np.ndarray:
    """The zigzag varints of `size` bytes (1 to 3) at column `at` of every row."""
    raw = np.zeros(rows.shape[0], dtype=np.int64)
    for byte in range(size):
        raw |= (rows[:, at + byte].astype(np.int64) & 0x7F) << (7 * byte)
    return (raw >> 1) ^ -(raw & 1)


def _kafka_piece(batch: StoredBatch, lo: int, hi: int, want_headers: bool) -> BatchPiece | None:
    """The fast path of a stored Kafka batch: each run of records of one layout (kafka_batch.uniform_layouts)
    sliced out as strided views; None when some record has a layout of its own or the offsets are not 0..n-1."""
    header = kafka_batch.read_header(batch.blob)
    data = kafka_batch.records_bytes(batch.blob, header, kafka_batch.DECOMPRESSED_BYTES_MAX)
    layouts = kafka_batch.uniform_layouts(data)
    if layouts is None or sum(run.count for run in layouts) != batch.record_count:
        return None
    buf = np.frombuffer(data, dtype=np.uint8)
    times, keys, values, index = [], [], [], 0
    for run in layouts:
        rows = buf[run.start:run.start + run.count * run.stride].reshape(run.count, run.stride)
        if not (_zigzag(rows, run.offset_at, run.offset_size) == np.arange(index, index + run.count)).all():
            return None
        times.append(header.base_timestamp + _zigzag(rows, run.ts_at, run.ts_size))
        keys.append(_binary_column(rows, run.key_at, run.key_len))
        values.append(_binary_column(rows, run.value_at, run.value_len))
        index += run.count
    timestamps_ms = np.concatenate(times)[lo:hi]
    if header.log_append_time:
        timestamps_ms = np.full(hi - lo, header.max_timestamp, dtype=np.int64)
    return BatchPiece(batch.base_offset + lo, timestamps_ms, pa.concat_arrays(keys)[lo:hi],
                      pa.concat_arrays(values)[lo:hi], [()] * (hi - lo) if want_headers else None)


def _general_piece(batch: StoredBatch, lo: int, hi: int, want_headers: bool) -> BatchPiece:
    columns = decode_columns(batch.blob)
    if len(columns.timestamps_ms) != batch.record_count:
        raise CorruptBatch(f"stored batch at offset {batch.base_offset} holds {len(columns.timestamps_ms)} "
                           f"records, header says {batch.record_count}")
    return BatchPiece(batch.base_offset + lo, np.array(columns.timestamps_ms[lo:hi], dtype=np.int64),
                      pa.array(columns.keys[lo:hi], pa.binary()), pa.array(columns.values[lo:hi], pa.binary()),
                      columns.headers[lo:hi] if want_headers else None)


def _sparse_piece(batch: StoredBatch, from_offset: int, until_offset: int, want_headers: bool) -> BatchPiece | None:
    """The records of a compacted batch (fewer records than its offsets span, each at its own offset) in
    [from_offset, until_offset); None when none is."""
    records = [r for r in decode_stored_batch("", 0, batch, from_offset) if r.offset < until_offset]
    if not records:
        return None
    return BatchPiece(records[0].offset, np.array([r.timestamp_ms for r in records], dtype=np.int64),
                      pa.array([r.key for r in records], pa.binary()),
                      pa.array([r.value for r in records], pa.binary()),
                      [r.headers for r in records] if want_headers else None,
                      np.array([r.offset for r in records], dtype=np.int64))


def batch_pieces(buf: bytes | memoryview, from_offset: int, until_offset: int,
                 want_headers: bool) -> Iterator[BatchPiece]:
    """Columns of the records of a fetched buffer with from_offset <= offset < until_offset (a compacted batch's
    records keep their offsets, with the gaps compaction left)."""
    for batch in iter_stored_batches(buf):
        lo = max(from_offset - batch.base_offset, 0)
        hi = min(until_offset - batch.base_offset, batch.record_count)
        if lo >= hi:
            continue
        if kafka_batch.is_kafka_batch(batch.blob) and \
                kafka_batch.read_header(batch.blob).record_count != batch.record_count:
            piece = _sparse_piece(batch, from_offset, until_offset, want_headers)
            if piece is not None:
                yield piece
            continue
        if kafka_batch.is_kafka_batch(batch.blob):
            piece = _kafka_piece(batch, lo, hi, want_headers)
        else:
            piece = _uniform_piece(batch, lo, hi, want_headers)
        yield piece if piece is not None else _general_piece(batch, lo, hi, want_headers)


# ---------------------------------------------------------------------- pieces → Spark rows

def _header_column(headers: list, arrow_type: pa.DataType) -> pa.Array:
    """Kafka's headers column: null for a record without headers, else its (key, value) pairs in order."""
    return pa.array([[{"key": name, "value": value} for name, value in record] if record else None
                     for record in headers], type=arrow_type)


def to_record_batch(topic: str, partition: int, pieces: list[BatchPiece], schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow record batch in `schema` (arrow_schema) from consecutive pieces of one partition."""
    count = sum(len(p) for p in pieces)
    timestamps_us = np.concatenate([p.timestamps_ms for p in pieces]) * 1000
    columns = [
        pa.concat_arrays([p.keys for p in pieces]),
        pa.concat_arrays([p.values for p in pieces]),
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        pa.array(np.concatenate([p.offset_column() for p in pieces]), pa.int64()),
        pa.array(timestamps_us, schema.field("timestamp").type),
        pa.repeat(pa.scalar(CREATE_TIME, pa.int32()), count),
    ]
    if len(schema) > len(BASE_FIELDS):
        headers = [h for p in pieces for h in p.headers]
        columns.append(_header_column(headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def to_rows(topic: str, partition: int, pieces: list[BatchPiece], include_headers: bool) -> Iterator[tuple]:
    """The same records as plain tuples in schema order (the slower path PySpark converts itself)."""
    for piece in pieces:
        keys, values, offsets = piece.keys.to_pylist(), piece.values.to_pylist(), piece.offset_column().tolist()
        for i, ts in enumerate(piece.timestamps_ms.tolist()):
            row = (keys[i], values[i], topic, partition, offsets[i],
                   _EPOCH + timedelta(milliseconds=ts), CREATE_TIME)
            if include_headers:
                row += ([(name, value) for name, value in piece.headers[i]] or None,)
            yield row
