"""A group's term, vote and commit index in two checksummed slots of one file, overwritten in place.

Every write goes, in place, to one of two fixed slots (no temporary file renamed over the old one: with thousands
of groups electing at once, renames cost the file system a journal transaction each):

    slot (SLOT_BYTES each, at 0 and SLOT_BYTES) = b"RBM1" | sequence >Q | length >I | crc32 >I | meta

Reading takes the valid slot (magic and CRC) with the highest sequence. Writes never touch the slot holding the
last record made durable (`durable_slot`): they go to the other one, and only once that write is made durable
(fdatasync, on the loop batched per pass, `durable_meta.py`) does it become the durable slot. A torn or lost write therefore
leaves the last durable term and vote readable. A file of the older single-record format (the meta alone, no
magic) is read and replaced by slots at the first write. The file stays open between writes (a write or an fsync
opens nothing once it is) and closes when its journal is parked or closed.

`meta` is a dict of str keys to int, str or None, in the byte format pysyncobj wrote it in (a pickle of protocol
2), so files stay readable by every broker version; it is written and read here by a codec of exactly that
subset (`encode_meta`, `decode_meta`), never by pickle, which could run code.
"""
from __future__ import annotations

import os
import struct
import threading

from isal.isal_zlib import crc32

from raftbus.broker.storage.private import FILE_MODE

MAGIC = b"RBM1"
SLOT_BYTES = 512
_HEADER = struct.Struct(">4sQII")  # magic, sequence, length, crc32 of (sequence, length, meta)


class SlotsTooSmall(ValueError):
    pass


class MetaCodecError(ValueError):
    """Bytes that are not a meta record (or a value a meta record cannot hold)."""


_U16, _U32, _I32 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<i")


def encode_meta(meta: dict) -> bytes:
    """`meta` (str keys; int, str or None values) as a protocol-2 pickle of a dict of those values."""
    parts = [b"\x80\x02}"]
    if meta:
        parts.append(b"(")
        for key, value in meta.items():
            if type(key) is not str:
                raise MetaCodecError(f"a meta key is a str, not {type(key).__name__}")
            parts.append(_encode_str(key))
            parts.append(_encode_value(value))
        parts.append(b"u")
    parts.append(b".")
    return b"".join(parts)


def _encode_str(text: str) -> bytes:
    data = text.encode()
    return b"X" + _U32.pack(len(data)) + data


def _encode_value(value) -> bytes:
    if value is None:
        return b"N"
    if type(value) is str:
        return _encode_str(value)
    if type(value) is not int:
        raise MetaCodecError(f"a meta value is an int, a str or None, not {type(value).__name__}")
    if 0 <= value < 0x100:
        return b"K" + bytes([value])
    if 0 <= value < 0x10000:
        return b"M" + _U16.pack(value)
    if -0x80000000 <= value < 0x80000000:
        return b"J" + _I32.pack(value)
    data = value.to_bytes((value.bit_length() >> 3) + 1, "little", signed=True)
    if len(data) > 0xFF:
        raise MetaCodecError("a meta integer is too large")
    return b"\x8a" + bytes([len(data)]) + data


def decode_meta(data: bytes) -> dict:
    """The dict `encode_meta` (or pysyncobj) wrote; MetaCodecError for anything else, including any pickle that
    names a class or a function."""
    try:
        return _decode_meta(memoryview(data))
    except (IndexError, KeyError, struct.error, UnicodeDecodeError) as exc:
        raise MetaCodecError(f"not a meta record: {type(exc).__name__}") from None


def _decode_meta(data) -> dict:  # noqa: C901 - one branch per opcode of the subset
    stack: list = []
    marks: list[int] = []
    memo: dict[int, object] = {}
    position = 0
    while True:
        op = data[position]
        position += 1
        if op == 0x80:  # PROTO
            position += 1
        elif op == 0x7D:  # EMPTY_DICT
            stack.append({})
        elif op == 0x28:  # MARK
            marks.append(len(stack))
        elif op == 0x71:  # BINPUT
            memo[data[position]] = stack[-1]
            position += 1
        elif op == 0x72:  # LONG_BINPUT
            memo[_U32.unpack_from(data, position)[0]] = stack[-1]
            position += 4
        elif op == 0x68:  # BINGET
            stack.append(memo[data[position]])
            position += 1
        elif op == 0x6A:  # LONG_BINGET
            stack.append(memo[_U32.unpack_from(data, position)[0]])
            position += 4
        elif op in (0x58, 0x8C):  # BINUNICODE, SHORT_BINUNICODE
            if op == 0x58:
                length, position = _U32.unpack_from(data, position)[0], position + 4
            else:
                length, position = data[position], position + 1
            if position + length > len(data):
                raise MetaCodecError("a meta string runs past the record")
            stack.append(bytes(data[position:position + length]).decode())
            position += length
        elif op == 0x4B:  # BININT1
            stack.append(data[position])
            position += 1
        elif op == 0x4D:  # BININT2
            stack.append(_U16.unpack_from(data, position)[0])
            position += 2
        elif op == 0x4A:  # BININT
            stack.append(_I32.unpack_from(data, position)[0])
            position += 4
        elif op == 0x8A:  # LONG1
            length = data[position]
            if position + 1 + length > len(data):
                raise MetaCodecError("a meta integer runs past the record")
            stack.append(int.from_bytes(data[position + 1:position + 1 + length], "little", signed=True))
            position += 1 + length
        elif op == 0x4E:  # NONE
            stack.append(None)
        elif op == 0x73:  # SETITEM
            value, key = stack.pop(), stack.pop()
            _set_item(stack[-1], key, value)
        elif op == 0x75:  # SETITEMS
            mark = marks.pop()
            items = stack[mark:]
            del stack[mark:]
            if len(items) % 2:
                raise MetaCodecError("a meta record's items do not pair up")
            for key, value in zip(items[::2], items[1::2]):
                _set_item(stack[-1], key, value)
        elif op == 0x2E:  # STOP
            break
        else:
            raise MetaCodecError(f"opcode {op:#04x} is not part of a meta record")
    if len(stack) != 1 or marks or type(stack[0]) is not dict:
        raise MetaCodecError("a meta record is one dict")
    return stack[0]


def _set_item(target, key, value) -> None:
    if type(target) is not dict or type(key) is not str or not (value is None or type(value) in (int, str)):
        raise MetaCodecError("a meta record maps str keys to int, str or None")
    target[key] = value


def encode_slot(sequence: int, meta: dict) -> bytes:
    data = encode_meta(meta)
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
        return sequence, decode_meta(data)
    except MetaCodecError:  # a slot that does not decode is no slot
        return None


def read_slots(path: str) -> tuple[dict, int, int]:
    """(meta, sequence, durable slot) of the newest valid record. No file: ({}, 0, 1), the first write goes to slot
    0. A file of the single-record format is read as is and counts as slot 0 (it is shorter than a slot): the first
    write goes to slot 1 and leaves it intact until that write is durable."""
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
        return decode_meta(raw[:SLOT_BYTES]), 0, 0  # the single-record format
    except MetaCodecError:  # an unreadable file is no metadata
        return {}, 0, 0


class SlotFile:
    """Writes of one meta file (see the module docstring); the caller makes a write durable and calls `synced`."""

    def __init__(self, path: str):
        self.path = path
        self.meta, self.sequence, self.durable_slot = read_slots(path)
        self._written_slot: int | None = None
        self.on_disk = self.sequence > 0 or bool(self.meta)  # else its directory entry needs a sync too
        self._fd = -1  # open from the first write until `close`
        self._fd_lock = threading.Lock()  # a journal may close the file from another thread (parking)

    def _file(self) -> int:
        """The open file (caller holds `_fd_lock`)."""
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        return self._fd

    def write(self, meta: dict) -> None:
        slot = 1 - self.durable_slot
        record = encode_slot(self.sequence + 1, meta)
        with self._fd_lock:
            os.pwrite(self._file(), record, slot * SLOT_BYTES)
        self.sequence += 1
        self._written_slot = slot
        self.on_disk = True

    def sync_data(self) -> None:
        """Make the writes so far durable (fdatasync: a slot's bytes and, for a new file, its length) and mark
        them so (`synced`)."""
        with self._fd_lock:
            os.fdatasync(self._file())
        self.synced()

    def close(self, *, wait: bool = True) -> bool:
        """Close the file (it reopens at the next write); without `wait`, only if no write holds it now."""
        if not self._fd_lock.acquire(blocking=wait):
            return False
        try:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            return True
        finally:
            self._fd_lock.release()

    def synced(self) -> None:
        """Everything written so far is durable: the slot written last holds the durable record now."""
        if self._written_slot is not None:
            self.durable_slot, self._written_slot = self._written_slot, None
