"""Kafka's RecordBatch v2 (magic 2): the batch format of the Kafka port, readable by the SDK.

A batch is a 61-byte header and its records (compressed as a whole when the attributes say so):

    base_offset >q | batch_length >i | partition_leader_epoch >i | magic >b (2) | crc >I |
    attributes >h | last_offset_delta >i | base_timestamp >q | max_timestamp >q |
    producer_id >q | producer_epoch >h | base_sequence >i | record_count >i | records

`crc` is CRC-32C of everything from `attributes` to the end, so the base offset (and the leader epoch) can be
set by whoever stores the batch without touching it. Each record:

    length varint | attributes >b | timestamp_delta varlong | offset_delta varint | key_length varint | key |
    value_length varint | value | header_count varint | per header: name_length varint | name |
    value_length varint | value

with zigzag varints and -1 for a null key, value or header value. Attribute bits: 0-2 compression (0 none,
1 gzip, 2 snappy, 3 lz4, 4 zstd), 3 timestamp type (1 = LogAppendTime: every record's timestamp is the batch's
max_timestamp), 4 transactional, 5 control.

Decompression is bounded: a batch whose records would inflate beyond `decompressed_bytes_max` is a
CorruptBatch, decided without inflating more than that many bytes.
"""
from __future__ import annotations

import struct
import zlib
from functools import lru_cache
from itertools import repeat
from operator import itemgetter
from typing import NamedTuple

import cramjam
import lz4.frame
import zstandard
from crc32c import crc32c

from raftbus.client.errors import CorruptBatch

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = HEADER.size  # 61
CRC_START = 21  # attributes: the first byte the CRC covers
_BASE_OFFSET = struct.Struct(">q")
_LENGTH_AT = 8
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_AT = 35

MAGIC = 2
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
COMPRESSION_MASK = 0x07
LOG_APPEND_TIME = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
DECOMPRESSED_BYTES_MAX = 64 * 1024 * 1024  # the SDK's bound when it decodes a fetched batch
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_BLOCK = struct.Struct(">i")

# A record of a batch to encode: (timestamp_ms, key, value, headers); headers are (name, value) pairs.
Header = tuple[str, "bytes | None"]


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & LOG_APPEND_TIME)


def is_kafka_batch(blob) -> bool:
    """Whether a stored blob is one Kafka batch rather than raftbus's own records (client/records.py).

    A Kafka batch's int32 at byte 8 (batch_length) is its size less 12. In raftbus's own format those bytes are
    the first record's key length, and a well-framed record needs at least 6 bytes after its key, so a key that
    long never frames: the test is exact for every blob the broker accepted."""
    return len(blob) >= HEADER_BYTES and _LENGTH.unpack_from(blob, _LENGTH_AT)[0] == len(blob) - 12


def read_header(blob) -> BatchHeader:
    """The header of one batch; CorruptBatch when it is not exactly one whole magic-2 batch."""
    if len(blob) < HEADER_BYTES:
        raise CorruptBatch(f"a record batch has a {HEADER_BYTES}-byte header; got {len(blob)} bytes")
    header = BatchHeader(*HEADER.unpack_from(blob))
    if header.magic != MAGIC:
        raise CorruptBatch(f"record batch magic {header.magic} is not supported (only magic 2, RecordBatch v2)")
    if header.batch_length != len(blob) - 12:
        raise CorruptBatch(f"record batch claims {header.batch_length + 12} bytes, carries {len(blob)}")
    return header


def check_crc(blob, header: BatchHeader) -> None:
    computed = crc32c(memoryview(blob)[CRC_START:])
    if computed != header.crc:
        raise CorruptBatch(f"record batch CRC-32C is {computed:#010x}, its header says {header.crc:#010x}")


def check_batch(blob, decompressed_bytes_max: int) -> BatchHeader:
    """The header of one Kafka batch after checking it whole: magic, length, CRC-32C, record count and offset
    deltas, and that its records (decompressed within `decompressed_bytes_max`) frame exactly `record_count`
    records. CorruptBatch (or EmptyBatch-like CorruptBatch for no records) otherwise; no record is decoded."""
    header = read_header(blob)
    check_crc(blob, header)
    if header.record_count < 1:
        raise CorruptBatch(f"a record batch holds at least one record, not {header.record_count}")
    if header.last_offset_delta != header.record_count - 1:
        raise CorruptBatch(f"record batch of {header.record_count} records has last_offset_delta "
                           f"{header.last_offset_delta}")
    records = records_bytes(blob, header, decompressed_bytes_max)
    found = count_records(records)
    if found != header.record_count:
        raise CorruptBatch(f"record batch holds {found} records, not the {header.record_count} it claims")
    return header


def records_bytes(blob, header: BatchHeader, decompressed_bytes_max: int) -> bytes:
    """The batch's records section, decompressed (at most `decompressed_bytes_max` bytes, else CorruptBatch)."""
    body = memoryview(blob)[HEADER_BYTES:]
    codec = header.compression
    if codec == NONE:
        return bytes(body)
    try:
        return decompress(codec, body, decompressed_bytes_max)
    except CorruptBatch:
        raise
    except Exception as exc:  # every codec's own error: the bytes do not decompress
        raise CorruptBatch(f"record batch does not decompress ({_CODEC_NAMES.get(codec, codec)}): {exc}") from None


_CODEC_NAMES = {code: name for name, code in CODECS.items()}


def decompress(codec: int, data, limit: int) -> bytes:
    """Inflate `data` by `codec`, never producing more than `limit` bytes (CorruptBatch beyond it)."""
    if codec == GZIP:
        inflater = zlib.decompressobj(wbits=47)  # gzip or zlib header
        out = inflater.decompress(data, limit + 1)
        if not inflater.eof:
            raise CorruptBatch(_too_big(limit) if len(out) > limit or inflater.unconsumed_tail
                               else "gzip stream is truncated")
        return _bounded(out, limit)
    if codec == SNAPPY:
        return _snappy_decompress(bytes(data), limit)
    if codec == LZ4:
        inflater = lz4.frame.LZ4FrameDecompressor()
        out = inflater.decompress(bytes(data), max_length=limit + 1)
        if not inflater.eof:
            raise CorruptBatch(_too_big(limit) if len(out) > limit else "lz4 frame is truncated")
        return _bounded(out, limit)
    if codec == ZSTD:
        with zstandard.ZstdDecompressor().stream_reader(bytes(data), read_across_frames=True) as reader:
            out = reader.read(limit + 1)
        return _bounded(out, limit)
    raise CorruptBatch(f"record batch compression codec {codec} is not one of none, gzip, snappy, lz4, zstd")


def _too_big(limit: int) -> str:
    return f"record batch decompresses to more than {limit} bytes (decompressed_bytes_max)"


def _bounded(out: bytes, limit: int) -> bytes:
    if len(out) > limit:
        raise CorruptBatch(_too_big(limit))
    return out


def _snappy_decompress(data: bytes, limit: int) -> bytes:
    """Raw snappy, or the xerial framing of Kafka's Java client (blocks of raw snappy, each length-prefixed)."""
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(data, limit)
    pos, parts, total = _XERIAL_HEADER.size, [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptBatch("snappy (xerial) block length is truncated")
        (size,) = _BLOCK.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptBatch("snappy (xerial) block runs past the batch end")
        block = _snappy_block(data[pos:pos + size], limit - total)
        total += len(block)
        parts.append(block)
        pos += size
    return b"".join(parts)


def _snappy_block(block: bytes, limit: int) -> bytes:
    if cramjam.snappy.decompress_raw_len(block) > limit:
        raise CorruptBatch(_too_big(limit))
    return bytes(cramjam.snappy.decompress_raw(block))


def compress(codec: int, data: bytes) -> bytes:
    """Deflate a records section (gzip, xerial-framed snappy as Kafka's Java client writes it, lz4 frame, zstd)."""
    if codec == NONE:
        return data
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        block = bytes(cramjam.snappy.compress_raw(data))
        return _XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1) + _BLOCK.pack(len(block)) + block
    if codec == LZ4:
        return lz4.frame.compress(data)
    if codec == ZSTD:
        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(f"unknown compression codec {codec}")


# ---------------------------------------------------------------------- varints


def _read_varint(data, pos: int) -> tuple[int, int]:
    """(zigzag-decoded value, next position); IndexError past the end, CorruptBatch beyond 10 bytes."""
    byte = data[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = data[pos]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos + 1
        shift += 7
        if shift > 63:
            raise CorruptBatch("varint longer than 10 bytes")


def _varint(value: int) -> bytes:
    """Zigzag varint of a 64-bit signed value."""
    encoded = (value << 1) ^ (value >> 63)
    if encoded < 0x80:
        return _SMALL_VARINTS[encoded]
    out = bytearray()
    while encoded >= 0x80:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


_SMALL_VARINTS = [bytes((n,)) for n in range(0x80)]
# zigzag varints of 0..VARINT_TABLE_SIZE-1 (lengths, offset and timestamp deltas), looked up instead of encoded
VARINT_TABLE_SIZE = 1 << 14
# built by encoded length (zigzag doubles a value >= 0: 1 byte below 64, 2 below 8,192, 3 above), as _varint would
VARINTS = ([bytes((2 * n,)) for n in range(64)]
           + [bytes((2 * n & 0x7F | 0x80, 2 * n >> 7)) for n in range(64, 8192)]
           + [bytes((2 * n & 0x7F | 0x80, 2 * n >> 7 & 0x7F | 0x80, 2 * n >> 14)) for n in range(8192, VARINT_TABLE_SIZE)])


def count_records(records) -> int:
    """How many records `records` frames exactly (each one's length varint then that many bytes);
    CorruptBatch when a length runs past the end or is negative. Decodes nothing.

    Records of one length follow each other in runs (a producer's fixed-size records change length only where
    an offset or timestamp delta needs one more varint byte), so after reading one record's length this counts
    how many records in a row start with the same length bytes, at C speed: the bytes at every stride from the
    record are compared with its own (bytes.lstrip on the strided slice). Each equal prefix is a record of that
    length, which puts the next one exactly one stride on, so the run is framed record by record without a
    Python step per record."""
    data = bytes(records)
    end, pos, count = len(data), 0, 0
    try:
        while pos < end:
            byte = data[pos]
            if byte < 0x80:
                length, start = (byte >> 1) ^ -(byte & 1), pos + 1
            else:
                length, start = _read_varint(data, pos)
            stride = start - pos + length
            if length < 0 or pos + stride > end:
                raise CorruptBatch(f"record length {length} at byte {pos} runs past the records' end {end}")
            run = (end - pos) // stride
            for at in range(pos, start):  # every byte of the length varint (1 or 2 for records up to 8 KiB)
                column = data[at:end:stride][:run]
                run = min(run, len(column) - len(column.lstrip(data[at:at + 1])))
            pos += run * stride
            count += run
    except IndexError:
        raise CorruptBatch(f"record length truncated at byte {pos}") from None
    return count


# ---------------------------------------------------------------------- encode


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers=None) -> bytes:
    """One record as it appears in a batch's records section (length varint first)."""
    if not headers and 0 <= timestamp_delta < VARINT_TABLE_SIZE and offset_delta < VARINT_TABLE_SIZE:
        table = VARINTS
        value_part = b"\x01" if value is None else (
            table[len(value)] + value if len(value) < VARINT_TABLE_SIZE else _varint(len(value)) + value)
        key_part = b"\x01" if key is None else (
            table[len(key)] + key if len(key) < VARINT_TABLE_SIZE else _varint(len(key)) + key)
        body = b"".join((b"\x00", table[timestamp_delta], table[offset_delta], key_part, value_part, b"\x00"))
        size = len(body)
        return (table[size] if size < VARINT_TABLE_SIZE else _varint(size)) + body
    parts = [b"\x00", _varint(timestamp_delta), _varint(offset_delta)]
    if key is None:
        parts.append(b"\x01")
    else:
        parts.append(_varint(len(key)))
        parts.append(key)
    if value is None:
        parts.append(b"\x01")
    else:
        parts.append(_varint(len(value)))
        parts.append(value)
    if headers:
        parts.append(_varint(len(headers)))
        for name, hvalue in headers:
            raw = name.encode()
            parts.append(_varint(len(raw)))
            parts.append(raw)
            if hvalue is None:
                parts.append(b"\x01")
            else:
                parts.append(_varint(len(hvalue)))
                parts.append(hvalue)
    else:
        parts.append(b"\x00")
    body = b"".join(parts)
    return _varint(len(body)) + body


def keyless_record(offset_delta: int, timestamp_delta: int, value: bytes) -> bytes:
    """One keyless, headerless record (the producers' common record) with table lookups only, when its deltas
    and value length are below VARINT_TABLE_SIZE (encode_record otherwise)."""
    table = VARINTS
    if 0 <= timestamp_delta < VARINT_TABLE_SIZE and offset_delta < VARINT_TABLE_SIZE and len(value) < 8000:
        ts, od, vl = table[timestamp_delta], table[offset_delta], table[len(value)]
        return b"".join((table[3 + len(ts) + len(od) + len(vl) + len(value)], b"\x00", ts, od, b"\x01", vl, value,
                         b"\x00"))
    return encode_record(offset_delta, timestamp_delta, None, value)


def encode_records(records) -> tuple[bytes, int, int, int]:
    """(records section, count, base timestamp, max timestamp) of (timestamp_ms, key, value, headers) records,
    uncompressed, offset deltas from 0 and timestamp deltas from the first record's."""
    base_ts = records[0][0]
    max_ts = base_ts
    parts = []
    append = parts.append
    for i, (ts, key, value, headers) in enumerate(records):
        if ts > max_ts:
            max_ts = ts
        append(encode_record(i, ts - base_ts, key, value, headers))
    return b"".join(parts), len(records), base_ts, max_ts


def encode_batch(records, *, base_offset: int = 0, compression: int = NONE, producer_id: int = NO_PRODUCER_ID,
                 producer_epoch: int = -1, base_sequence: int = NO_SEQUENCE, log_append_time_ms: int | None = None,
                 partition_leader_epoch: int = -1) -> bytes:
    """One batch of (timestamp_ms, key, value, headers) records; `log_append_time_ms` makes it a LogAppendTime
    batch whose max_timestamp is that time."""
    records = list(records)
    if not records:
        raise ValueError("a record batch holds at least one record")
    base_ts = records[0][0]
    max_ts = max(r[0] for r in records)
    body = b"".join(encode_record(i, ts - base_ts, key, value, headers)
                    for i, (ts, key, value, headers) in enumerate(records))
    attributes = compression
    if log_append_time_ms is not None:
        attributes |= LOG_APPEND_TIME
        max_ts = log_append_time_ms
    return seal(base_offset, attributes, len(records), base_ts, max_ts, compress(compression, body),
                producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                partition_leader_epoch=partition_leader_epoch)


def seal(base_offset: int, attributes: int, record_count: int, base_timestamp: int, max_timestamp: int,
         records: bytes, *, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1,
         base_sequence: int = NO_SEQUENCE, partition_leader_epoch: int = -1,
         last_offset_delta: int | None = None) -> bytes:
    """A batch from its (already compressed) records section: the header with its length and CRC-32C.
    `last_offset_delta` defaults to record_count - 1 (a compacted batch keeps its original one)."""
    last = record_count - 1 if last_offset_delta is None else last_offset_delta
    tail = HEADER.pack(0, 0, 0, 0, 0, attributes, last, base_timestamp, max_timestamp, producer_id,
                       producer_epoch, base_sequence, record_count)[CRC_START:] + records
    head = struct.pack(">qiibI", base_offset, len(tail) + 9, partition_leader_epoch, MAGIC, crc32c(tail))
    return head + tail


def record_spans(data: bytes) -> list[tuple[int, int, int]]:
    """(start, end, offset_delta) of every record of a (decompressed) records section, reading only each record's
    length, attributes, timestamp delta and offset delta; CorruptBatch when a length runs past the end."""
    spans, pos, end = [], 0, len(data)
    try:
        while pos < end:
            length, start = _inline(data, pos)
            if length < 0 or start + length > end:
                raise CorruptBatch(f"record length {length} at byte {pos} runs past the records' end {end}")
            _, at = _inline(data, start + 1)  # the timestamp delta, after the attributes byte
            offset_delta, _ = _inline(data, at)
            spans.append((pos, start + length, offset_delta))
            pos = start + length
    except IndexError:
        raise CorruptBatch(f"record truncated at byte {pos}") from None
    return spans


def retain_records(blob, keep_offset_deltas, decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX) -> bytes | None:
    """The batch with only the records whose offset delta is in `keep_offset_deltas`, each record's bytes as they
    were (so their offset and timestamp deltas stand), compressed again with the batch's codec; the header keeps
    its base timestamp, max timestamp, producer, sequence and last offset delta (as Kafka's log cleaner does), with
    the record count, length and CRC-32C of what is left. None when no record is left."""
    header = read_header(blob)
    data = records_bytes(blob, header, decompressed_bytes_max)
    kept = [data[start:end] for start, end, delta in record_spans(data) if delta in keep_offset_deltas]
    if not kept:
        return None
    return seal(header.base_offset, header.attributes, len(kept), header.base_timestamp, header.max_timestamp,
                compress(header.compression, b"".join(kept)), producer_id=header.producer_id,
                producer_epoch=header.producer_epoch, base_sequence=header.base_sequence,
                partition_leader_epoch=header.partition_leader_epoch, last_offset_delta=header.last_offset_delta)


def with_log_append_time(blob, append_time_ms: int) -> bytes:
    """The batch marked LogAppendTime with max_timestamp = `append_time_ms`, its CRC-32C recomputed."""
    data = bytearray(blob)
    (attributes,) = _ATTRIBUTES.unpack_from(data, CRC_START)
    _ATTRIBUTES.pack_into(data, CRC_START, attributes | LOG_APPEND_TIME)
    _MAX_TIMESTAMP.pack_into(data, _MAX_TIMESTAMP_AT, append_time_ms)
    _CRC.pack_into(data, 17, crc32c(memoryview(data)[CRC_START:]))
    return bytes(data)


def base_offset_bytes(base_offset: int) -> bytes:
    """The 8 bytes that start a batch stored at `base_offset` (the CRC does not cover them)."""
    return _BASE_OFFSET.pack(base_offset)


# ---------------------------------------------------------------------- decode


class KafkaRecord(NamedTuple):
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


def decode_batch(blob, base_offset: int | None = None,
                 decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX) -> list[KafkaRecord]:
    """Every record of one batch, at `base_offset` (default: the batch's own); CorruptBatch on bad input.
    A LogAppendTime batch gives every record its max_timestamp."""
    header = read_header(blob)
    data = records_bytes(blob, header, decompressed_bytes_max)
    base = header.base_offset if base_offset is None else base_offset
    rows = decode_rows(data, base, header.base_timestamp,
                       header.max_timestamp if header.log_append_time else None)
    if len(rows) != header.record_count:
        raise CorruptBatch(f"record batch holds {len(rows)} records, header says {header.record_count}")
    new = tuple.__new__
    return [new(KafkaRecord, row) for row in rows]


RUN_RECORDS_MIN = 8  # shorter runs of one record length are decoded record by record
_ZIGZAG = [(n >> 1) ^ -(n & 1) for n in range(1 << 14)]  # zigzag value of every raw varint below 2^14


def decode_rows(data: bytes, base_offset: int, base_timestamp: int, append_time: int | None) -> list[tuple]:
    """(offset, timestamp_ms, key, value, headers) of every record of a (decompressed) records section;
    CorruptBatch when a record does not add up to its length (see decode_pieces)."""
    out: list[tuple] = []
    for piece in decode_pieces(data, base_offset, base_timestamp, append_time):
        if type(piece) is list:
            out += piece
        else:
            out += zip(piece.offsets, piece.times, piece.keys, piece.values, repeat((), len(piece.values)))
    return out


class Run(NamedTuple):
    """A run of records of one layout, without headers, as columns."""

    offsets: list[int] | range
    times: list[int]
    keys: list
    values: list


def decode_pieces(data: bytes, base_offset: int, base_timestamp: int, append_time: int | None) -> list:
    """The records of a (decompressed) records section in order, as pieces: a `Run` (columns), or a list of
    (offset, timestamp_ms, key, value, headers) rows read one by one; CorruptBatch when a record does not add up
    to its length.

    Records of one length in a row (a producer's fixed-size records, see count_records) whose fields all sit at
    the same places are unpacked a run at a time: their key and value by one struct over the run, their offset
    and timestamp deltas from the strided bytes of those varints. Anything else is read record by record."""
    pieces: list = []
    loose: list | None = None  # the rows read one by one since the last run
    pos, end = 0, len(data)
    try:
        while pos < end:
            length, start = _inline(data, pos)
            stride = start - pos + length
            if length < 0 or pos + stride > end:
                raise CorruptBatch(f"record length {length} at byte {pos} runs past the records' end {end}")
            run = _run_length(data, pos, start, stride, end)
            columns = _uniform_run(data, pos, start, length, run, base_offset, base_timestamp, append_time) \
                if run >= RUN_RECORDS_MIN else None
            if columns is not None:
                pieces.append(columns)
                loose = None
                pos += run * stride
            else:
                if loose is None:
                    loose = []
                    pieces.append(loose)
                pos = _decode_one(data, pos, base_offset, base_timestamp, append_time, loose)
    except (IndexError, UnicodeDecodeError) as exc:
        raise CorruptBatch(f"record batch truncated or garbled at byte {pos}: {exc}") from None
    return pieces


def _run_length(data: bytes, pos: int, start: int, stride: int, end: int) -> int:
    """How many records from `pos` on start with the same length varint (each one stride after the last)."""
    run = (end - pos) // stride
    for at in range(pos, start):
        column = data[at:end:stride][:run]
        run = min(run, len(column) - len(column.lstrip(data[at:at + 1])))
    return run


def _varint_size(data: bytes, at: int) -> int:
    """1, 2 or 3 for a varint of that many bytes at `at` (deltas below 2^20), 0 for a longer one."""
    for size in (1, 2, 3):
        if data[at + size - 1] < 0x80:
            return size
    return 0


def _column_is(data: bytes, at: int, stop: int, stride: int, size: int) -> bool:
    """Whether every varint of the strided column at `at` has `size` bytes (1 to 3)."""
    for byte in range(size - 1):
        if min(data[at + byte:stop:stride]) < 0x80:
            return False
    return max(data[at + size - 1:stop:stride]) < 0x80


def _same(data: bytes, at: int, size: int, stop: int, stride: int, run: int) -> bool:
    """Whether the `size` bytes at `at` repeat at every stride for `run` records."""
    for byte in range(at, at + size):
        column = data[byte:stop:stride]
        if len(column) != run or column.count(data[byte]) != run:
            return False
    return True


def _deltas(data: bytes, at: int, stop: int, stride: int, size: int) -> list[int]:
    zigzag = _ZIGZAG
    if size == 1:
        return [zigzag[b] for b in data[at:stop:stride]]
    if size == 2:
        return [zigzag[(lo & 0x7F) | (hi << 7)] for lo, hi in zip(data[at:stop:stride], data[at + 1:stop:stride])]
    raws = [(a & 0x7F) | ((b & 0x7F) << 7) | (c << 14)
            for a, b, c in zip(data[at:stop:stride], data[at + 1:stop:stride], data[at + 2:stop:stride])]
    return [(raw >> 1) ^ -(raw & 1) for raw in raws]


def _uniform_run(data: bytes, pos: int, start: int, length: int, run: int, base_offset: int, base_timestamp: int,
                 append_time: int | None) -> Run | None:
    """The columns of `run` records of one length from `pos`, when all of them have the first one's layout (same
    varint sizes, same key and value lengths, no headers); None otherwise (they are then read one by one)."""
    layout = _layout(data, pos, start, length, run)
    if layout is None:
        return None
    stride = layout.stride
    stop = pos + run * stride
    offsets = _consecutive(data, pos + layout.offset_at, stop, stride, layout.offset_size, run)
    if offsets is None:
        offsets = [base_offset + d for d in _deltas(data, pos + layout.offset_at, stop, stride, layout.offset_size)]
    else:
        offsets = range(base_offset + offsets, base_offset + offsets + run)
    if append_time is not None:
        times = [append_time] * run
    elif _same(data, pos + layout.ts_at, layout.ts_size, stop, stride, run):  # one timestamp (one millisecond)
        times = [base_timestamp + _inline(data, pos + layout.ts_at)[0]] * run
    else:
        times = [base_timestamp + d for d in _deltas(data, pos + layout.ts_at, stop, stride, layout.ts_size)]
    key_bytes, value_bytes = max(layout.key_len, 0), max(layout.value_len, 0)
    struct_layout = _run_layout(layout.key_at, key_bytes, layout.value_at - layout.key_at - key_bytes, value_bytes,
                                stride - layout.value_at - value_bytes)
    fields = list(struct_layout.iter_unpack(memoryview(data)[pos:stop]))
    keys = [None] * run if layout.key_len < 0 else list(map(_FIRST, fields))
    values = [None] * run if layout.value_len < 0 else list(map(_LAST, fields))
    return Run(offsets, times, keys, values)


_FIRST, _LAST = itemgetter(0), itemgetter(-1)


def _consecutive(data: bytes, at: int, stop: int, stride: int, size: int, run: int) -> int | None:
    """The first delta when the strided varints of `size` bytes at `at` are consecutive deltas (a producer's
    offsets: first, first + 1, ...), else None; one comparison of bytes per varint byte, no step per record."""
    first = _inline(data, at)[0]
    low, high = _DELTAS_OF_SIZE[size]
    if not (low <= first and first + run <= high):
        return None
    for byte in range(size):
        if data[at + byte:stop:stride] != _encoded_deltas(size, byte)[first:first + run]:
            return None
    return first


_ENCODED_DELTAS_MAX = 1 << 14  # consecutive deltas are recognised below this (2-byte varints)
# the non-negative deltas whose zigzag varint has 1, 2 or 3 bytes (below _ENCODED_DELTAS_MAX)
_DELTAS_OF_SIZE = {1: (0, 64), 2: (64, 8192), 3: (8192, _ENCODED_DELTAS_MAX)}


@lru_cache(maxsize=None)
def _encoded_deltas(size: int, byte: int) -> bytes:
    """Byte `byte` of the zigzag varint of every delta below _ENCODED_DELTAS_MAX, filled only over the deltas whose
    varint has `size` bytes (_DELTAS_OF_SIZE; `_consecutive` compares nothing else)."""
    low, high = _DELTAS_OF_SIZE[size]
    more = 0x80 if byte < size - 1 else 0  # every byte but the last carries the continuation bit
    column = bytes((((delta << 1) >> (7 * byte)) & 0x7F) | more for delta in range(low, high))
    return bytes(low) + column + bytes(_ENCODED_DELTAS_MAX - high)


class RunLayout(NamedTuple):
    """Where the fields of a run of records of one layout sit (byte positions in the records section and within a
    record); lengths of -1 are null keys or values."""

    start: int  # the run's first record
    stride: int
    count: int
    ts_at: int  # within a record, and the varint's size in bytes (1 or 2)
    ts_size: int
    offset_at: int
    offset_size: int
    key_at: int
    key_len: int
    value_at: int
    value_len: int


def uniform_layouts(data: bytes) -> list[RunLayout] | None:
    """The runs a records section is made of when every record belongs to a run of one layout (what columnar
    readers unpack without a Python step per record); None when any record needs reading by itself."""
    runs, pos, end = [], 0, len(data)
    while pos < end:
        length, start = _inline(data, pos)
        stride = start - pos + length
        if length < 0 or pos + stride > end:
            raise CorruptBatch(f"record length {length} at byte {pos} runs past the records' end {end}")
        run = _run_length(data, pos, start, stride, end)
        layout = _layout(data, pos, start, length, run)
        if layout is None:
            return None
        runs.append(layout)
        pos += run * stride
    return runs


def _layout(data: bytes, pos: int, start: int, length: int, run: int) -> RunLayout | None:
    """The layout of `run` records from `pos` (the length varint's end at `start`) when all of them share the
    first one's: delta varints of one to three bytes, of the same sizes, the same key and value length varints, and no
    headers; each checked at every record by strided slices. None otherwise."""
    stride = start - pos + length
    stop = pos + run * stride
    ts_at = start + 1
    ts_size = _varint_size(data, ts_at)
    offset_at = ts_at + ts_size
    offset_size = _varint_size(data, offset_at) if ts_size else 0
    if not offset_size:
        return None
    key_len_at = offset_at + offset_size
    key_len, key_at = _inline(data, key_len_at)
    value_len_at = key_at + max(key_len, 0)
    value_len, value_at = _inline(data, value_len_at)
    tail = value_at + max(value_len, 0)
    if key_len < -1 or value_len < -1 or tail != start + length - 1 or data[tail] != 0:
        return None
    if not (_column_is(data, ts_at, stop, stride, ts_size) and _column_is(data, offset_at, stop, stride, offset_size)
            and _same(data, key_len_at, key_at - key_len_at, stop, stride, run)
            and _same(data, value_len_at, value_at - value_len_at, stop, stride, run)
            and _same(data, tail, 1, stop, stride, run)):
        return None
    return RunLayout(pos, stride, run, ts_at - pos, ts_size, offset_at - pos, offset_size, key_at - pos, key_len,
                     value_at - pos, value_len)


@lru_cache(maxsize=256)
def _run_layout(key_skip: int, key_len: int, value_skip: int, value_len: int, tail: int) -> struct.Struct:
    """A record of a uniform run as a struct: skipped bytes, the key, skipped bytes, the value, the tail."""
    return struct.Struct(f">{key_skip}x{key_len}s{value_skip}x{value_len}s{tail}x")


def _decode_one(data: bytes, pos: int, base_offset: int, base_timestamp: int, append_time: int | None,
                out: list) -> int:
    """Append one record's row (read field by field); returns where the next record starts."""
    length, pos = _inline(data, pos)
    record_end = pos + length
    ts_delta, at = _inline(data, pos + 1)
    offset_delta, at = _inline(data, at)
    size, at = _inline(data, at)
    if size < -1:
        raise CorruptBatch(f"key length {size} at byte {at}")
    key = None if size < 0 else data[at:at + size]
    at += max(size, 0)
    size, at = _inline(data, at)
    if size < -1:
        raise CorruptBatch(f"value length {size} at byte {at}")
    value = None if size < 0 else data[at:at + size]
    at += max(size, 0)
    if data[at] == 0:
        headers, at = (), at + 1
    else:
        count, at = _read_varint(data, at)
        headers, at = _decode_headers(data, at, count)
    if at != record_end or length < 0:
        raise CorruptBatch(f"record at byte {record_end - length} does not add up to its length {length}")
    out.append((base_offset + offset_delta, append_time if append_time is not None else base_timestamp + ts_delta,
                key, value, headers))
    return record_end

def _inline(data, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos`: (value, next position), one- and two-byte ones without a loop."""
    byte = data[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    second = data[pos + 1]
    if second < 0x80:
        raw = (byte & 0x7F) | (second << 7)
        return (raw >> 1) ^ -(raw & 1), pos + 2
    return _read_varint(data, pos)

def _decode_headers(data, pos: int, count: int) -> tuple[tuple[Header, ...], int]:
    if count < 0:
        raise CorruptBatch(f"header count {count} is negative")
    headers = []
    for _ in range(count):
        name_len, pos = _read_varint(data, pos)
        if name_len < 0:
            raise CorruptBatch("a header name is never null")
        name = bytes(data[pos:pos + name_len]).decode()
        pos += name_len
        value_len, pos = _read_varint(data, pos)
        if value_len < 0:
            value = None
        else:
            value, pos = bytes(data[pos:pos + value_len]), pos + value_len
        headers.append((name, value))
    return tuple(headers), pos
