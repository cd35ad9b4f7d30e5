"""Goal: check_framing accepts exactly the batches a consumer can decode, with the record count they claim, and
refuses every other byte string with CorruptBatch (the broker runs it on each produce batch before replicating)."""
import struct

import pytest

from raftbus.client.errors import CorruptBatch
from raftbus.client.records import check_framing, decode_batch, encode_batch

UNIFORM = [(1, None, b"v" * 100, ())] * 50
VARIED = [(1, b"k1", b"short", ()), (2, None, None, ()), (3, b"key", b"x" * 300, (("h", b"1"), ("trace", None)))]


@pytest.mark.parametrize("records", [UNIFORM, VARIED, [(5, b"", b"", ())]])
def test_a_well_framed_batch_passes_with_its_count(records):
    blob, count, _ = encode_batch(records)
    check_framing(blob, count)
    assert len(decode_batch(blob)) == count


@pytest.mark.parametrize("records", [UNIFORM, VARIED])
@pytest.mark.parametrize("delta", [-1, 1])
def test_a_wrong_record_count_is_corrupt(records, delta):
    blob, count, _ = encode_batch(records)
    with pytest.raises(CorruptBatch):
        check_framing(blob, count + delta)


def test_one_odd_record_in_a_uniform_looking_batch_is_found():
    blob, count, _ = encode_batch(UNIFORM)
    stride = len(blob) // count
    broken = bytearray(blob)
    struct.pack_into(">i", broken, stride * 20 + 12, 99)  # record 20's value length no longer matches its bytes
    with pytest.raises(CorruptBatch):
        check_framing(bytes(broken), count)


@pytest.mark.parametrize("mangle", [
    lambda b: b[:-1],                                 # truncated
    lambda b: b + b"\x00",                            # a stray byte after the last record
    lambda b: b[:8] + struct.pack(">i", -7) + b[12:],  # a negative key length
    lambda b: b"\xff" * len(b),                       # garbage
])
def test_damaged_bytes_are_corrupt(mangle):
    blob, count, _ = encode_batch(VARIED)
    with pytest.raises(CorruptBatch):
        check_framing(mangle(blob), count)


def test_a_header_name_that_is_not_utf8_is_corrupt():
    blob, count, _ = encode_batch([(1, None, b"v", (("ab", b"x"),))])
    name_at = blob.index(b"ab")
    with pytest.raises(CorruptBatch):
        check_framing(blob[:name_at] + b"\xff\xfe" + blob[name_at + 2:], count)


@pytest.mark.parametrize("count", [0, -3])
def test_a_batch_claims_at_least_one_record(count):
    with pytest.raises(CorruptBatch):
        check_framing(encode_batch(UNIFORM)[0], count)


ONE = [(7, b"key", b"value", ())]


@pytest.mark.parametrize("mangle", [
    lambda b: b[:-1],                                   # truncated
    lambda b: b + b"\x00",                              # a stray byte
    lambda b: b[:8] + struct.pack(">i", -2) + b[12:],   # a key length below -1
    lambda b: b[:8] + struct.pack(">i", 4) + b[12:],    # a key length that overruns into the value length
    lambda b: b[:-2] + b"\x00\x01",                     # a header count with no header
])
def test_one_record_message_is_checked_as_thoroughly(mangle):
    """A queue message is a one-record batch: its shape alone decides, so every length must add up exactly."""
    blob, count, _ = encode_batch(ONE)
    check_framing(blob, 1)
    with pytest.raises(CorruptBatch):
        check_framing(mangle(blob), count)
    with pytest.raises(CorruptBatch):
        check_framing(blob + blob, 1)
