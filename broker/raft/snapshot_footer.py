"""The footer of a raftbus snapshot file: where the store copy ends and which Raft entries follow it.

A snapshot file is the store copy (`data_len` bytes), then the footer (marshal of plain data), then its length
(u64) and `SNAPSHOT_MAGIC`. Snapshot files travel between brokers, so reading one trusts nothing: the lengths
must add up to the file size before the footer is decoded, the footer's bytes are scanned before marshal builds
anything (plain_marshal.py: plain data only, no count its bytes cannot hold, so a forged footer never makes a
broker allocate more than a small multiple of its length; marshal can build code objects, which are refused,
never run), and the decoded footer must have exactly the expected shape.
"""
from __future__ import annotations

import os
import struct

from raftbus.broker.raft import plain_marshal

SNAPSHOT_MAGIC = b"RBSNAP01"
TAIL = struct.Struct(">Q8s")
_KEYS = {"last", "prev", "cluster", "data_len", "data_index", "entries"}
_OPTIONAL_KEYS = {"membership"}  # (index, voters, learners) of the group's configuration (raft/configuration.py)


class SnapshotFooterError(ValueError):
    """A snapshot file that is not a well-formed raftbus snapshot."""


def write_footer(f, footer: dict) -> None:
    data = plain_marshal.dumps(footer)
    f.write(data)
    f.write(TAIL.pack(len(data), SNAPSHOT_MAGIC))


def read_footer(f) -> dict:
    """The checked footer of the snapshot open in `f` (binary, seekable)."""
    size = f.seek(0, os.SEEK_END)
    if size < TAIL.size:
        raise SnapshotFooterError(f"a snapshot of {size} bytes is shorter than its tail")
    f.seek(size - TAIL.size)
    footer_len, magic = TAIL.unpack(f.read(TAIL.size))
    if magic != SNAPSHOT_MAGIC:
        raise SnapshotFooterError("not a raftbus snapshot")
    if not 0 < footer_len <= size - TAIL.size:
        raise SnapshotFooterError(f"footer length {footer_len} does not fit a file of {size} bytes")
    f.seek(size - TAIL.size - footer_len)
    try:
        footer = plain_marshal.loads(f.read(footer_len))
    except plain_marshal.PlainDataError as exc:
        raise SnapshotFooterError(f"undecodable snapshot footer: {exc}") from None
    check_footer(footer)
    if footer["data_len"] + footer_len + TAIL.size != size:
        raise SnapshotFooterError("the snapshot's data length does not match its size")
    return footer


def check_footer(footer) -> None:
    if type(footer) is not dict or not _KEYS <= set(footer) <= _KEYS | _OPTIONAL_KEYS:
        raise SnapshotFooterError("a snapshot footer has the wrong fields")
    if "membership" in footer:
        _check_membership(footer["membership"])
    for key in ("last", "prev"):
        _check_entry(footer[key])
    if type(footer["cluster"]) is not list or not all(type(n) is str for n in footer["cluster"]):
        raise SnapshotFooterError("a snapshot footer's cluster is not a list of node ids")
    for key in ("data_len", "data_index"):
        if type(footer[key]) is not int or footer[key] < 0:
            raise SnapshotFooterError(f"a snapshot footer's {key} is not a count")
    entries = footer["entries"]
    if type(entries) is not list or not all(
            type(e) is tuple and len(e) == 2 and type(e[0]) is bytes and type(e[1]) is int for e in entries):
        raise SnapshotFooterError("a snapshot footer's entries are not (bytes, index) pairs")


def _check_entry(entry) -> None:
    if not (type(entry) is tuple and len(entry) == 3 and type(entry[0]) is bytes
            and type(entry[1]) is int and type(entry[2]) is int):
        raise SnapshotFooterError("a snapshot footer's entry is not (bytes, index, term)")


def _check_membership(value) -> None:
    def ids(items) -> bool:
        return type(items) is list and all(type(i) is int and i >= 0 for i in items)

    if not (type(value) is tuple and len(value) == 3 and type(value[0]) is int and value[0] >= 0
            and ids(value[1]) and value[1] and ids(value[2])):
        raise SnapshotFooterError("a snapshot footer's membership is not (index, voters, learners)")
