"""Snapshot footers: written and read back; every malformed or hostile footer is refused before use."""
from __future__ import annotations

import io
import marshal
import struct

import pytest

from raftbus.broker.raft.snapshot_footer import (SNAPSHOT_MAGIC, TAIL, SnapshotFooterError, read_footer,
                                                 write_footer)

FOOTER = {"last": (b"\x00P", 12, 3), "prev": (b"\x01", 11, 3), "cluster": ["1", "2", "3"], "data_len": 5,
          "data_index": 10, "entries": [(b"\x00P1", 11), (b"\x00P2", 12)]}


def snapshot(footer: dict, data: bytes = b"store") -> io.BytesIO:
    f = io.BytesIO()
    f.write(data)
    write_footer(f, footer)
    return f


def with_raw_footer(raw: bytes, data: bytes = b"store", length: int | None = None) -> io.BytesIO:
    return io.BytesIO(data + raw + TAIL.pack(len(raw) if length is None else length, SNAPSHOT_MAGIC))


def test_a_footer_round_trips():
    """What write_footer wrote, read_footer returns."""
    assert read_footer(snapshot(FOOTER)) == FOOTER


@pytest.mark.parametrize("f", [
    io.BytesIO(b"short"),
    io.BytesIO(b"x" * 40),                                                     # no magic
    with_raw_footer(marshal.dumps(FOOTER), length=2**60),                      # length beyond the file
    with_raw_footer(marshal.dumps(FOOTER), length=0),
    with_raw_footer(b"\xff\xfe garbage"),                                      # undecodable
    with_raw_footer(marshal.dumps(compile("open('/tmp/ran', 'w')", "x", "exec"))),  # a code object
    with_raw_footer(marshal.dumps({**FOOTER, "entries": [(b"x", "1")]})),      # wrong shape
    with_raw_footer(marshal.dumps({**FOOTER, "extra": 1})),                    # unknown field
    with_raw_footer(marshal.dumps({**FOOTER, "data_len": 99})),                # lengths do not add up
    with_raw_footer(marshal.dumps({**FOOTER, "last": [b"", 1, 1]})),           # list, not tuple
], ids=["short", "no-magic", "long-length", "zero-length", "garbage", "code-object", "bad-entries", "extra-field",
        "bad-data-len", "bad-last"])
def test_malformed_footers_are_refused(f):
    """Lengths that do not add up, undecodable bytes, code objects and wrong shapes raise SnapshotFooterError."""
    with pytest.raises(SnapshotFooterError):
        read_footer(f)


def test_the_tail_is_a_length_and_the_magic():
    """The file ends with the footer's length (u64) and the magic."""
    f = snapshot(FOOTER)
    length, magic = struct.unpack(">Q8s", f.getvalue()[-16:])
    assert magic == SNAPSHOT_MAGIC and length == len(f.getvalue()) - 16 - 5
