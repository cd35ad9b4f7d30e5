"""What pysyncobj would pickle, in raftbus's own format: nothing a peer sends is ever unpickled.

pysyncobj pickles in four places: replicated method calls (REGULAR entries), membership and code-version entries,
and a log entry too large for one message, which it sends in chunks (`transmission`) and unpickles on receipt.
`raftbus.broker.raft.group` installs this module as pysyncobj's `pickle`, so all four go through here:

- REGULAR entries never reach it: `RaftGroup.submit` writes the command's own bytes after the entry type, and
  `_Raft` applies them without decoding anything (the state machines' codec checks the command).
- A chunked log entry is `b"E" + index (u64) + term (u64) + the entry's bytes`, decoded only after its length is
  checked.
- Anything else (a replicated call, a membership or version entry: raftbus writes none) is refused with
  `EntryCodecError` in both directions.
"""
from __future__ import annotations

import struct

ENTRY_TAG = b"E"
_ENTRY_HEADER = struct.Struct(">cQQ")  # tag, index, term


class EntryCodecError(ValueError):
    """Bytes that are not a raftbus Raft entry, or a value raftbus does not write into one."""


def dumps(value, protocol=None) -> bytes:
    """A log entry (command bytes, index, term) as bytes; pysyncobj calls this to chunk a large entry."""
    if (type(value) is tuple and len(value) == 3 and isinstance(value[0], (bytes, bytearray))
            and type(value[1]) is int and type(value[2]) is int):
        command, index, term = value
        return _ENTRY_HEADER.pack(ENTRY_TAG, index, term) + bytes(command)
    raise EntryCodecError(f"raftbus Raft entries carry no {type(value).__name__} objects")


def loads(data) -> tuple[bytes, int, int]:
    """The (command bytes, index, term) that `dumps` wrote; EntryCodecError for anything else."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise EntryCodecError(f"an entry is bytes, not {type(data).__name__}")
    data = bytes(data)
    if len(data) < _ENTRY_HEADER.size:
        raise EntryCodecError(f"an entry of {len(data)} bytes is shorter than its header")
    tag, index, term = _ENTRY_HEADER.unpack_from(data)
    if tag != ENTRY_TAG:
        raise EntryCodecError(f"unknown entry tag {tag!r} (pickled data is refused)")
    return data[_ENTRY_HEADER.size:], index, term
