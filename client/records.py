"""The record batch codec: the opaque bytes the SDK produces and reads back (the broker never parses them).

Stream batches are written as one Kafka RecordBatch v2 (client/kafka_batch.py, `encode_stream_batch`), which
Kafka clients read as stored; every reader here decodes either that or raftbus's own format below, which queue
messages use (`encode_batch`). A raftbus record batch is records back to back, each:
    timestamp_ms >q | key_len >i (-1 = None) | key | value_len >i (-1 = None) | value |
    header_count >H | per header: name_len >H | utf-8 name | value_len >i (-1 = None) | value

A fetched buffer (FetchResponse.batches) is stored batches back to back, each:
    base_offset >q | record_count >I | append_time_ms >q | max_timestamp_ms >q | blob_len >I | blob
where blob is a record batch as above. Record n of a stored batch has offset base_offset + n.
"""
from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain, islice, repeat
from itertools import count as counting
from typing import NamedTuple

from raftbus.client import kafka_batch
from raftbus.client.errors import CorruptBatch

# A header: (name, value); value None is allowed.
Header = tuple[str, "bytes | None"]
# A record to encode: (timestamp_ms, key, value, headers); headers is a sequence of Header or None/().
RecordTuple = tuple[int, "bytes | None", "bytes | None", "tuple[Header, ...] | None"]

_TS_KEYLEN = struct.Struct(">qi")
_TS_KEYLEN_VLEN = struct.Struct(">qii")
_LEN = struct.Struct(">i")
_LEN_HCOUNT = struct.Struct(">iH")
_HCOUNT = struct.Struct(">H")
_HNAME = struct.Struct(">H")
_BASE_OFFSET = struct.Struct(">q")
STORED_HEADER = struct.Struct(">IqqI")  # record_count, append_time_ms, max_timestamp_ms, blob_len
_STORED_PREFIX = struct.Struct(">qIqqI")  # base_offset + STORED_HEADER

RECORD_OVERHEAD_BYTES = _TS_KEYLEN.size + _LEN_HCOUNT.size  # 18 bytes without key, value and headers
keyless_record_head = _TS_KEYLEN_VLEN.pack  # (timestamp_ms, -1, len(value)): a keyless record up to its value
NO_HEADERS = b"\x00\x00"  # a record's end when it has no headers
HEADER_OVERHEAD_BYTES = _HNAME.size + _LEN.size
STORED_BATCH_OVERHEAD_BYTES = _STORED_PREFIX.size


class Record(NamedTuple):
    """One record read back from a partition (a named tuple: reading many costs little)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp_ms: int


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed (a named tuple: one per acknowledged record costs little)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


class StoredBatch(NamedTuple):
    """One stored batch of a fetched buffer; `blob` is a view of its undecoded record batch."""

    base_offset: int
    record_count: int
    append_time_ms: int
    max_timestamp_ms: int
    blob: memoryview


def record_size(key: bytes | None, value: bytes | None, headers: Iterable[Header] | None = None) -> int:
    """Encoded size in bytes of one record (what it adds to a batch)."""
    size = RECORD_OVERHEAD_BYTES + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    if headers:
        for name, hvalue in headers:
            size += HEADER_OVERHEAD_BYTES + len(name.encode()) + (len(hvalue) if hvalue is not None else 0)
    return size


def _encode_headers(headers) -> bytes:
    parts = [_HCOUNT.pack(len(headers))]
    for name, hvalue in headers:
        raw = name.encode()
        parts.append(_HNAME.pack(len(raw)))
        parts.append(raw)
        if hvalue is None:
            parts.append(_LEN.pack(-1))
        else:
            parts.append(_LEN.pack(len(hvalue)))
            parts.append(hvalue)
    return b"".join(parts)


def encode_batch(records: Iterable[RecordTuple]) -> tuple[bytes, int, int]:
    """Encode (timestamp_ms, key, value, headers) tuples; returns (blob, record_count, max_timestamp_ms)."""
    parts: list[bytes] = []
    append = parts.append
    pack_ts_key, pack_len, pack_len_h = _TS_KEYLEN.pack, _LEN.pack, _LEN_HCOUNT.pack
    count = 0
    max_ts = -1
    for ts, key, value, headers in records:
        count += 1
        if ts > max_ts:
            max_ts = ts
        if key is None:
            append(pack_ts_key(ts, -1))
        else:
            append(pack_ts_key(ts, len(key)))
            append(key)
        if headers:
            if value is None:
                append(pack_len(-1))
            else:
                append(pack_len(len(value)))
                append(value)
            append(_encode_headers(headers))
        elif value is None:
            append(pack_len_h(-1, 0))
        else:
            append(pack_len(len(value)))
            append(value)
            append(b"\x00\x00")
    return b"".join(parts), count, max_ts


def encode_stream_batch(records) -> tuple[bytes, int, int]:
    """(blob, record_count, max_timestamp_ms) of (timestamp_ms, key, value, headers) records as one Kafka
    RecordBatch v2 (client/kafka_batch.py): what the SDK's producers write to stream topics, so Kafka clients read
    the stored batch as it is (docs/kafka.md). Queue messages keep this module's own format (encode_batch)."""
    records = list(records)
    section, count, base_ts, max_ts = kafka_batch.encode_records(records)
    return kafka_batch.seal(0, kafka_batch.NONE, count, base_ts, max_ts, section), count, max_ts


def append_record(buffer: bytearray, timestamp_ms: int, key: bytes | None, value: bytes | None,
                  headers: "tuple[Header, ...] | None") -> None:
    """Encode one record at the end of `buffer`, exactly as encode_batch would (the Producer builds its batches
    record by record this way, so a batch costs no second pass when it is sent)."""
    if key is None:
        if value is not None and not headers:
            buffer += _TS_KEYLEN_VLEN.pack(timestamp_ms, -1, len(value))
            buffer += value
            buffer += NO_HEADERS
            return
        buffer += _TS_KEYLEN.pack(timestamp_ms, -1)
    else:
        buffer += _TS_KEYLEN.pack(timestamp_ms, len(key))
        buffer += key
    if value is None:
        buffer += _LEN.pack(-1)
    else:
        buffer += _LEN.pack(len(value))
        buffer += value
    buffer += _encode_headers(headers) if headers else NO_HEADERS


def decode_batch(blob: bytes | memoryview) -> list[RecordTuple]:
    """Decode a record batch into (timestamp_ms, key, value, headers) tuples; CorruptBatch on bad input.
    A Kafka RecordBatch v2 (client/kafka_batch.py) decodes the same way."""
    if kafka_batch.is_kafka_batch(blob):
        return [(r.timestamp_ms, r.key, r.value, r.headers) for r in kafka_batch.decode_batch(blob)]
    return list(_iter_records(blob))


def _iter_records(blob: bytes | memoryview) -> Iterator[RecordTuple]:
    data = bytes(blob)
    end = len(data)
    pos = 0
    unpack_ts_key, unpack_len, unpack_h = _TS_KEYLEN.unpack_from, _LEN.unpack_from, _HCOUNT.unpack_from
    try:
        while pos < end:
            ts, klen = unpack_ts_key(data, pos)
            pos += 12
            key, pos = _take(data, pos, klen, end)
            (vlen,) = unpack_len(data, pos)
            pos += 4
            value, pos = _take(data, pos, vlen, end)
            (hcount,) = unpack_h(data, pos)
            pos += 2
            headers: tuple[Header, ...] = ()
            if hcount:
                headers, pos = _decode_headers(data, pos, hcount, end)
            yield ts, key, value, headers
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptBatch(f"record batch truncated or garbled at byte {pos}: {exc}") from None


def _take(data: bytes, pos: int, length: int, end: int) -> tuple[bytes | None, int]:
    if length == -1:
        return None, pos
    if length < 0 or pos + length > end:
        raise CorruptBatch(f"field length {length} at byte {pos} runs past the batch end {end}")
    return data[pos : pos + length], pos + length


def _decode_headers(data: bytes, pos: int, hcount: int, end: int) -> tuple[tuple[Header, ...], int]:
    headers = []
    for _ in range(hcount):
        (nlen,) = _HNAME.unpack_from(data, pos)
        pos += 2
        if pos + nlen > end:
            raise CorruptBatch(f"header name at byte {pos} runs past the batch end")
        name = data[pos : pos + nlen].decode()
        pos += nlen
        (hlen,) = _LEN.unpack_from(data, pos)
        pos += 4
        hvalue, pos = _take(data, pos, hlen, end)
        headers.append((name, hvalue))
    return tuple(headers), pos


def check_framing(blob: bytes | memoryview, record_count: int,
                  decompressed_bytes_max: int = kafka_batch.DECOMPRESSED_BYTES_MAX) -> None:
    """CorruptBatch unless `blob` is exactly `record_count` well-framed records (the broker checks a produce batch
    with this before replicating it, so no consumer ever meets a batch it cannot decode).

    A blob that is one Kafka RecordBatch v2 (client/kafka_batch.py's `is_kafka_batch`) is checked as one: its
    CRC-32C, its header and the framing of its records, decompressed within `decompressed_bytes_max`.

    Only lengths are read, never copied out: when every record has the first record's shape (same key and value
    lengths, no headers, the common case of a producer's batch) the length fields are compared at each stride by
    C-speed slices; otherwise the records are walked field by field.
    """
    if kafka_batch.is_kafka_batch(blob):
        header = kafka_batch.check_batch(blob, decompressed_bytes_max)
        if header.record_count != record_count:
            raise CorruptBatch(f"record batch holds {header.record_count} records, not the {record_count} claimed")
        return
    data = bytes(blob)
    if record_count < 1:
        raise CorruptBatch(f"a batch holds at least one record, not {record_count}")
    if _uniform_shape(data, record_count) is not None:
        return
    end, pos, records = len(data), 0, 0
    try:
        while pos < end:
            _, klen = _TS_KEYLEN.unpack_from(data, pos)
            pos = _skip(pos + 12, klen, end)
            (vlen,) = _LEN.unpack_from(data, pos)
            pos = _skip(pos + 4, vlen, end)
            (hcount,) = _HCOUNT.unpack_from(data, pos)
            pos += 2
            if hcount:
                _, pos = _decode_headers(data, pos, hcount, end)
            records += 1
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptBatch(f"record batch truncated or garbled at byte {pos}: {exc}") from None
    if records != record_count:
        raise CorruptBatch(f"record batch holds {records} records, not the {record_count} it claims")


def _skip(pos: int, length: int, end: int) -> int:
    if length == -1:
        return pos
    if length < 0 or pos + length > end:
        raise CorruptBatch(f"field length {length} at byte {pos} runs past the batch end {end}")
    return pos + length


def _uniform_shape(data: bytes, record_count: int) -> tuple[int, int] | None:
    """(key_len, value_len) when every record of `data` has the first one's key length, value length and no
    headers, each record's length fields compared at each stride (C-speed slices); None otherwise."""
    shape = uniform_record_shape(data, record_count)
    if shape is None or record_count == 1:  # one record: its lengths were read and add up to the blob
        return shape
    key_bytes, value_bytes = max(shape[0], 0), max(shape[1], 0)
    stride = RECORD_OVERHEAD_BYTES + key_bytes + value_bytes
    fields = [*range(8, 12), *range(12 + key_bytes, 16 + key_bytes),
              *range(16 + key_bytes + value_bytes, 18 + key_bytes + value_bytes)]
    return shape if all(data[at::stride].count(data[at]) == record_count for at in fields) else None


@lru_cache(maxsize=64)
def _uniform_layout(key_bytes: int, value_bytes: int) -> struct.Struct:
    """One record of a uniform batch as a struct: timestamp, key length, key, value length, value, header count."""
    return struct.Struct(f">qi{key_bytes}si{value_bytes}sH")


def encode_stored_batch(base_offset: int, record_count: int, append_time_ms: int, max_timestamp_ms: int,
                        blob: bytes) -> bytes:
    """One stored batch as it appears in FetchResponse.batches (the broker's side of the format)."""
    return _STORED_PREFIX.pack(base_offset, record_count, append_time_ms, max_timestamp_ms, len(blob)) + blob


def iter_stored_batches(buf: bytes | memoryview) -> Iterator[StoredBatch]:
    """Walk a fetched buffer batch by batch without decoding records; CorruptBatch on truncation."""
    view = memoryview(buf)
    end = len(view)
    pos = 0
    prefix = _STORED_PREFIX.size
    while pos < end:
        if pos + prefix > end:
            raise CorruptBatch(f"stored batch header at byte {pos} truncated ({end - pos} of {prefix} bytes)")
        base, count, append_ms, max_ts, blob_len = _STORED_PREFIX.unpack_from(view, pos)
        pos += prefix
        if pos + blob_len > end:
            raise CorruptBatch(f"stored batch at offset {base} claims {blob_len} bytes, {end - pos} remain")
        yield StoredBatch(base, count, append_ms, max_ts, view[pos : pos + blob_len])
        pos += blob_len


def decode_fetched(topic: str, partition: int, buf: bytes | memoryview, from_offset: int = 0) -> Iterator[Record]:
    """Yield the Records of a fetched buffer at or above `from_offset` (earlier ones in a batch are skipped)."""
    for batch in iter_stored_batches(buf):
        if batch.base_offset + batch.record_count > from_offset:
            yield from decode_stored_batch(topic, partition, batch, from_offset)


def decode_stored_batch(topic: str, partition: int, batch: StoredBatch, from_offset: int = 0) -> list[Record]:
    """The Records of one stored batch at or above `from_offset`; CorruptBatch when the bytes do not add up.

    The hot loop of every consumer: one pass, local names, no per-record calls but the struct unpacks and the
    tuple itself (headerless records take the short path). A batch whose records all have one shape (the same key
    and value lengths, no headers: what a producer of fixed-size records sends), checked at every record's length
    fields first, is unpacked by one struct over the whole blob instead.
    """
    if kafka_batch.is_kafka_batch(batch.blob):
        return _decode_kafka(topic, partition, batch, from_offset)
    data = bytes(batch.blob)
    shape = _uniform_shape(data, batch.record_count)
    if shape is not None:
        return _decode_uniform(topic, partition, batch, data, shape, from_offset)
    return _decode_records(topic, partition, batch, data, from_offset)


def _kafka_pieces(batch: StoredBatch) -> list:
    """The pieces (kafka_batch.decode_pieces) of a stored Kafka batch; CorruptBatch when they do not hold the
    header's record count."""
    header = kafka_batch.read_header(batch.blob)
    data = kafka_batch.records_bytes(batch.blob, header, kafka_batch.DECOMPRESSED_BYTES_MAX)
    pieces = kafka_batch.decode_pieces(data, batch.base_offset, header.base_timestamp,
                                       header.max_timestamp if header.log_append_time else None)
    held = sum(len(piece) if type(piece) is list else len(piece.values) for piece in pieces)
    if held != header.record_count:
        raise CorruptBatch(f"record batch holds {held} records, header says {header.record_count}")
    return pieces


def _piece_records(topic: str, partition: int, piece) -> Iterator[Record]:
    """The Records of one piece: a run's columns zipped into Records as they are taken (no Python step per record,
    and no list: a Record an application drops is freed before the collector sees it), or a list of rows."""
    new = tuple.__new__
    if type(piece) is list:  # rows read one by one
        return iter([new(Record, (topic, partition, offset, key, value, headers, ts))
                     for offset, ts, key, value, headers in piece])
    return map(new, repeat(Record), zip(repeat(topic), repeat(partition), piece.offsets, piece.keys, piece.values,
                                        repeat(()), piece.times))


def _decode_kafka(topic: str, partition: int, batch: StoredBatch, from_offset: int) -> list[Record]:
    """decode_stored_batch of a Kafka batch (written through the Kafka port or by the SDK), at its stored offsets."""
    out: list[Record] = []
    for piece in _kafka_pieces(batch):
        out += _piece_records(topic, partition, piece)
    if from_offset > batch.base_offset:
        out = [record for record in out if record.offset >= from_offset]
    return out


def iter_stored_batch(topic: str, partition: int, batch: StoredBatch, from_offset: int = 0,
                      end_offset: int | None = None) -> Iterator[Record]:
    """The Records of one stored batch at or above `from_offset` and below `end_offset` (None: all), as
    decode_stored_batch gives them, but made as they are taken where the batch allows it (a Kafka batch's runs of
    one layout with consecutive offsets): an application that handles records one at a time then holds few of them
    at once, and the cyclic collector, which never untracks a `Record` (a tuple subclass), sees few. Bad bytes
    raise CorruptBatch here, before any record is given."""
    if not kafka_batch.is_kafka_batch(batch.blob):
        return iter(_in_range(decode_stored_batch(topic, partition, batch, from_offset), end_offset))
    parts = []
    for piece in _kafka_pieces(batch):
        offsets = None if type(piece) is list else piece.offsets
        if type(offsets) is range:
            start = max(from_offset - offsets.start, 0)
            stop = len(offsets) if end_offset is None else max(min(end_offset - offsets.start, len(offsets)), 0)
            if start < stop:
                parts.append(islice(_piece_records(topic, partition, piece), start, stop))
        else:
            parts.append(_in_range([r for r in _piece_records(topic, partition, piece) if r.offset >= from_offset],
                                   end_offset))
    return chain.from_iterable(parts)


def _in_range(records: list[Record], end_offset: int | None) -> list[Record]:
    if end_offset is not None and records and records[-1].offset >= end_offset:
        return [r for r in records if r.offset < end_offset]
    return records


def _decode_records(topic: str, partition: int, batch: StoredBatch, data: bytes, from_offset: int) -> list[Record]:
    """decode_stored_batch record by record (any framing; CorruptBatch when it does not add up)."""
    end = len(data)
    records: list[Record] = []
    append = records.append
    new = tuple.__new__
    unpack_head, unpack_len = _TS_KEYLEN_VLEN.unpack_from, _LEN.unpack_from
    offset = batch.base_offset
    pos = 0
    try:
        while pos < end:
            ts, klen, vlen = unpack_head(data, pos)  # vlen is only right when there is no key
            pos += 12
            if klen == -1:
                key = None
            elif 0 <= klen and pos + klen <= end:
                key = data[pos:pos + klen]
                pos += klen
                (vlen,) = unpack_len(data, pos)
            else:
                raise CorruptBatch(f"key length {klen} at byte {pos} runs past the batch end {end}")
            pos += 4
            if vlen == -1:
                value = None
            elif 0 <= vlen and pos + vlen <= end:
                value = data[pos:pos + vlen]
                pos += vlen
            else:
                raise CorruptBatch(f"value length {vlen} at byte {pos} runs past the batch end {end}")
            if data[pos] or data[pos + 1]:
                headers, pos = _decode_headers(data, pos + 2, (data[pos] << 8) | data[pos + 1], end)
            else:
                headers = ()
                pos += 2
            if offset >= from_offset:
                append(new(Record, (topic, partition, offset, key, value, headers, ts)))
            offset += 1
    except (struct.error, UnicodeDecodeError, IndexError) as exc:
        raise CorruptBatch(f"record batch truncated or garbled at byte {pos}: {exc}") from None
    if offset - batch.base_offset != batch.record_count:
        raise CorruptBatch(f"stored batch at offset {batch.base_offset} holds {offset - batch.base_offset} records, "
                           f"header says {batch.record_count}")
    return records


def _decode_uniform(topic: str, partition: int, batch: StoredBatch, data: bytes, shape: tuple[int, int],
                    from_offset: int) -> list[Record]:
    """decode_stored_batch of a batch whose framing _uniform_shape checked: every record has `shape`."""
    key_len, value_len = shape
    key_bytes, value_bytes = max(key_len, 0), max(value_len, 0)
    layout = _uniform_layout(key_bytes, value_bytes)
    skipped = min(max(from_offset - batch.base_offset, 0), batch.record_count)
    rows = layout.iter_unpack(memoryview(data)[skipped * layout.size:])
    offsets = counting(batch.base_offset + skipped)
    new = tuple.__new__
    if key_len >= 0 and value_len >= 0:
        return [new(Record, (topic, partition, offset, key, value, (), ts))
                for offset, (ts, _, key, _, value, _) in zip(offsets, rows)]
    no_key, no_value = key_len == -1, value_len == -1
    return [new(Record, (topic, partition, offset, None if no_key else key, None if no_value else value, (), ts))
            for offset, (ts, _, key, _, value, _) in zip(offsets, rows)]


# ---------------------------------------------------------------------- columnar decode (Spark source)

@dataclass(slots=True)
class RecordColumns:
    """The records of one record batch as parallel columns (what columnar readers such as Arrow want)."""

    timestamps_ms: list[int]
    keys: list["bytes | None"]
    values: list["bytes | None"]
    headers: list[tuple[Header, ...]]


def decode_columns(blob: bytes | memoryview) -> RecordColumns:
    """Decode a record batch into columns, with one pass and no per-record tuple; CorruptBatch on bad input.

    Column i of every list belongs to record i, exactly as decode_batch(blob)[i] would give it.
    """
    if kafka_batch.is_kafka_batch(blob):
        rows = kafka_batch.decode_batch(blob)
        return RecordColumns([r.timestamp_ms for r in rows], [r.key for r in rows], [r.value for r in rows],
                             [r.headers for r in rows])
    data = bytes(blob)
    end = len(data)
    columns = RecordColumns([], [], [], [])
    add_ts, add_key, add_value, add_headers = (columns.timestamps_ms.append, columns.keys.append,
                                               columns.values.append, columns.headers.append)
    unpack_ts_key, unpack_len, unpack_h = _TS_KEYLEN.unpack_from, _LEN.unpack_from, _HCOUNT.unpack_from
    pos = 0
    try:
        while pos < end:
            ts, klen = unpack_ts_key(data, pos)
            pos += 12
            if klen >= 0 and pos + klen <= end:
                add_key(data[pos : pos + klen])
                pos += klen
            else:
                key, pos = _take(data, pos, klen, end)
                add_key(key)
            (vlen,) = unpack_len(data, pos)
            pos += 4
            if vlen >= 0 and pos + vlen <= end:
                add_value(data[pos : pos + vlen])
                pos += vlen
            else:
                value, pos = _take(data, pos, vlen, end)
                add_value(value)
            (hcount,) = unpack_h(data, pos)
            pos += 2
            if hcount:
                headers, pos = _decode_headers(data, pos, hcount, end)
                add_headers(headers)
            else:
                add_headers(())
            add_ts(ts)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptBatch(f"record batch truncated or garbled at byte {pos}: {exc}") from None
    return columns


def uniform_record_shape(blob: bytes | memoryview, record_count: int) -> tuple[int, int] | None:
    """(key_len, value_len) of the first record when the blob could hold `record_count` records of that one
    shape without headers (len(blob) == record_count * stride); None otherwise. -1 means a None field.

    This is a cheap candidate test only: a caller using it must still check every record's lengths (a
    vectorised reader compares the length fields at each stride) before trusting the fixed layout.
    """
    if record_count < 1 or len(blob) < RECORD_OVERHEAD_BYTES or kafka_batch.is_kafka_batch(blob):
        return None
    _, klen = _TS_KEYLEN.unpack_from(blob, 0)
    if klen < -1:
        return None
    pos = 12 + max(klen, 0)
    if pos + 6 > len(blob):
        return None
    (vlen,) = _LEN.unpack_from(blob, pos)
    if vlen < -1:
        return None
    pos += 4 + max(vlen, 0)
    if pos + 2 > len(blob) or _HCOUNT.unpack_from(blob, pos)[0] != 0:
        return None
    stride = RECORD_OVERHEAD_BYTES + max(klen, 0) + max(vlen, 0)
    return (klen, vlen) if stride * record_count == len(blob) else None
