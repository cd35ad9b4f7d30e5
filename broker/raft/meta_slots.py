"""A group's term, vote and commit index in two checksummed slots of one file, overwritten in place.

pysyncobj (and raftbus until now) wrote the whole file to `<file>.tmp` and renamed it over the old one. A rename
over an existing file costs ext4 a journal transaction and the new file's writeback; with thousands of groups
electing at once, those renames were nine tenths of the Raft loop's time. Here every write goes, in place, to
one of two fixed slots:

    slot (SLOT_BYTES each, at 0 and SLOT_BYTES) = b"RBM1" | sequence >Q | length >I | crc32 >I | meta

Reading takes the valid slot (magic and CRC) with the highest sequence. Writes never touch the slot holding the
last record made durable (`durable_slot`): they go to the other one, and only once that write is made durable
(fsync, or the loop's syncfs, `durable_meta.py`) does it become the durable slot. A torn or lost write therefore
leaves the last durable term and vote readable, as the rename did. A file in pysyncobj's format (no magic) is
read as before and replaced by slots at the first write.
"""
from __future__ import annotations

import os
import struct

import pysyncobj.journal as raft_journal
from isal.isal_zlib import crc32

from raftbus.broker.storage.private import FILE_MODE

MAGIC = b"RBM1"
SLOT_BYTES = 512
_HEADER = struct.Struct(">4sQII")  # magic, sequence, length, crc32 of (sequence, length, meta)


class SlotsTooSmall(ValueError):
    pass


def encode_slot(sequence: int, meta: dict) -> bytes:
    data = raft_journal.dumps(meta)
    if _HEADER.size + len(data) > SLOT_BYTES:
        raise SlotsTooSmall(f"meta of {len(data)} bytes does not fit a {SLOT_BYTES}-byte slot")
    crc = crc32(struct.pack(">QI", sequence, len(data)) + data)
    return _HEADER.pack(MAGIC, sequence, len(data), crc) + data


def decode_slot(raw: bytes) -> tuple[int, dict] | None:
    if len(raw) < _HEADER.size:
        return None
    magic, sequence, length, crc = _HEADER.unpack_from(raw)
    data = raw[_HEADER.size:_HEADER.size + length]
    if magic != MAGIC or len(data) != length or crc32(struct.pack(">QI", sequence, length) + data) != crc:
        return None
    try:
        return sequence, raft_journal.loads(data)
    except Exception:  # noqa: BLE001 - a slot that does not decode is no slot
        return None


def read_slots(path: str) -> tuple[dict, int, int]:
    """(meta, sequence, durable slot) of the newest valid record. No file: ({}, 0, 1), the first write goes to slot
    0. A file in pysyncobj's format is read as is and counts as slot 0 (it is shorter than a slot): the first write
    goes to slot 1 and leaves it intact until that write is durable."""
    try:
        with open(path, "rb") as f:
            raw = f.read(2 * SLOT_BYTES)
    except FileNotFoundError:
        return {}, 0, 1
    found = [(decoded[0], slot, decoded[1]) for slot in (0, 1)
             if (decoded := decode_slot(raw[slot * SLOT_BYTES:(slot + 1) * SLOT_BYTES])) is not None]
    if found:
        sequence, slot, meta = max(found, key=lambda item: item[0])
        return meta, sequence, slot
    try:
        return raft_journal.loads(raw[:SLOT_BYTES]), 0, 0  # pysyncobj's format
    except Exception:  # noqa: BLE001 - as pysyncobj: an unreadable file is no metadata
        return {}, 0, 0


class SlotFile:
    """Writes of one meta file (see the module docstring); the caller makes a write durable and calls `synced`."""

    def __init__(self, path: str):
        self.path = path
        self.meta, self.sequence, self.durable_slot = read_slots(path)
        self._written_slot: int | None = None
        self.on_disk = self.sequence > 0 or bool(self.meta)  # else its directory entry needs a sync too

    def write(self, meta: dict) -> None:
        slot = 1 - self.durable_slot
        record = encode_slot(self.sequence + 1, meta)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
        try:
            os.pwrite(fd, record, slot * SLOT_BYTES)
        finally:
            os.close(fd)
        self.sequence += 1
        self._written_slot = slot
        self.on_disk = True

    def fsync(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.synced()

    def synced(self) -> None:
        """Everything written so far is durable: the slot written last holds the durable record now."""
        if self._written_slot is not None:
            self.durable_slot, self._written_slot = self._written_slot, None
