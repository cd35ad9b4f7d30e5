"""A snapshot file sent to one follower as a sequence of chunks, acknowledged, resumable, checked before use.

The leader's `SnapshotSender` reads the snapshot file (kept open, so a newer snapshot replacing it does not change
what is being sent) in chunks of `snapshot_chunk_bytes`; each chunk says which snapshot it belongs to (`id`), where
it starts (`offset`) and the file's length (`size`); the last one carries the SHA-256 of the whole file. The
follower's `SnapshotReceiver` appends chunks in order to a temporary file and acknowledges the length it holds;
a chunk that would leave a gap is answered with that length, and the sender resumes from there (after a dropped
connection, from the last acknowledged offset). Only a file of exactly `size` bytes whose digest matches is handed
on; the caller then moves it into place atomically.

Nothing here decodes anything but plain values: a chunk's data is written to a file, never unpickled. How many
chunks are in flight is decided by the caller (`raftbus.broker.raft.transfer`).
"""
from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass

from raftbus.broker.raft.clock import monotonic_s
from raftbus.broker.storage.private import private_opener

DIGEST_BYTES = 32  # SHA-256
ID_CHARS_MAX = 128


class SnapshotChunkError(ValueError):
    """A chunk whose fields are not what a raftbus leader sends; it is refused without writing anything."""


def snapshot_id(origin: int, stat: os.stat_result) -> str:
    """Names one snapshot file of one broker: a rewritten snapshot (new inode, size or time) gets a new name."""
    return f"{origin}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}"


@dataclass(frozen=True)
class Chunk:
    snapshot_id: str
    offset: int
    size: int  # of the whole file
    data: bytes
    digest: bytes | None  # SHA-256 of the whole file, on the last chunk only

    @property
    def end(self) -> int:
        return self.offset + len(self.data)

    def fields(self) -> dict:
        return {"id": self.snapshot_id, "offset": self.offset, "size": self.size, "data": self.data,
                "digest": self.digest}

    @classmethod
    def from_fields(cls, message: dict) -> "Chunk":
        """The chunk in a peer's message, with every field checked (SnapshotChunkError otherwise)."""
        sid, offset, size = message.get("id"), message.get("offset"), message.get("size")
        data, digest = message.get("data"), message.get("digest")
        if type(sid) is not str or not 0 < len(sid) <= ID_CHARS_MAX:
            raise SnapshotChunkError("a snapshot chunk's id is not a short string")
        if type(offset) is not int or type(size) is not int or not 0 <= offset < size:
            raise SnapshotChunkError("a snapshot chunk's offset is not inside its size")
        if type(data) is not bytes or not data or offset + len(data) > size:
            raise SnapshotChunkError("a snapshot chunk's data is empty or runs past its size")
        last = offset + len(data) == size
        if last != (type(digest) is bytes and len(digest) == DIGEST_BYTES) or (not last and digest is not None):
            raise SnapshotChunkError("only a snapshot's last chunk carries its digest")
        return cls(sid, offset, size, data, digest)


class SnapshotSender:
    """One snapshot file on its way to one follower: what was sent, what the follower acknowledged."""

    def __init__(self, path, origin: int, chunk_bytes: int):
        self._fd = os.open(path, os.O_RDONLY)
        stat = os.fstat(self._fd)
        self.id = snapshot_id(origin, stat)
        self.size = stat.st_size
        self.chunk_bytes = chunk_bytes
        self.sent = 0  # bytes sent (the next chunk starts here)
        self.acked = 0  # bytes the follower holds
        self._hasher = hashlib.sha256()
        self._hashed = 0  # the digest covers the file up to here
        self._resent_from: int | None = None  # where the last resend asked for started
        self.progress_at = 0.0  # when the follower last acknowledged more (the caller's clock)

    @property
    def in_flight(self) -> int:
        return self.sent - self.acked

    @property
    def done(self) -> bool:
        return self.acked == self.size

    def next_chunk_bytes(self) -> int:
        return min(self.chunk_bytes, self.size - self.sent)

    def next_chunk(self) -> Chunk:
        offset = self.sent
        data = self._read(offset, self.next_chunk_bytes())
        self._hash_through(offset + len(data), data, offset)
        self.sent += len(data)
        digest = self._hasher.digest() if self.sent == self.size else None
        return Chunk(self.id, offset, self.size, data, digest)

    def on_ack(self, held: int, resend: bool = False) -> bool:
        """The follower holds `held` bytes. Less than it acknowledged before: it started over (restarted, or found
        the file damaged); `resend`: a chunk arrived after a gap (it missed some); either way sending goes back
        there, once per gap (the chunks still in flight report the same gap). More than was sent: it kept an
        earlier partial copy, and sending jumps ahead. Returns whether sending moved back."""
        held = max(0, min(int(held), self.size))
        rewind = held < self.acked or (resend and held < self.sent and held != self._resent_from)
        if held > self.acked:
            self._resent_from = None
        if rewind:
            self._resent_from = held
        if rewind or held > self.sent:
            self.sent = held
        self.acked = held
        if held > self._hashed:
            self._hash_through(held)
        return rewind

    def is_file(self, path) -> bool:
        """Whether `path` still names the file being sent (a newer snapshot replaces it under the same name)."""
        try:
            return os.stat(path).st_ino == os.fstat(self._fd).st_ino
        except OSError:
            return False

    def resume(self) -> None:
        """The connection dropped: what was in flight is lost; send again from the last acknowledged offset."""
        self.sent = self.acked

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _read(self, offset: int, length: int) -> bytes:
        data = os.pread(self._fd, length, offset)
        if len(data) != length:
            raise OSError(f"snapshot {self.id} is shorter than the {self.size} bytes it had when opened")
        return data

    def _hash_through(self, end: int, data: bytes = b"", data_offset: int = 0) -> None:
        """Extend the digest to `end` (from `data`, read at `data_offset`, where it covers the range)."""
        while self._hashed < end:
            if data_offset <= self._hashed < data_offset + len(data):
                piece = data[self._hashed - data_offset:end - data_offset]
            else:
                piece = self._read(self._hashed, min(self.chunk_bytes, end - self._hashed))
            self._hasher.update(piece)
            self._hashed += len(piece)


class SnapshotReceiver:
    """The snapshot a follower is receiving, written in order to `path`."""

    def __init__(self, path, clock=monotonic_s):
        self.path = str(path)
        self._clock = clock  # monotonic seconds: how long the fsync of a complete file took
        self.id: str | None = None
        self.size = 0
        self.written = 0
        self._file = None
        self._hasher = None
        self.sync_s = 0.0  # how long the last complete file took to fsync

    def accept(self, chunk: Chunk) -> bool:
        """Write what `chunk` adds; True once the whole file is here, synced, with the right digest. A digest
        that does not match discards the copy (and `written` drops to 0, so the sender starts over)."""
        if chunk.snapshot_id != self.id:
            if chunk.offset != 0:
                self._reset()
                return False  # a snapshot we hold nothing of: the answer (0 bytes) has it start over
            self._start(chunk)
        if chunk.size != self.size:
            raise SnapshotChunkError(f"snapshot {chunk.snapshot_id} changed size from {self.size} to {chunk.size}")
        if chunk.offset > self.written or chunk.end <= self.written:
            return False  # a gap (the answer has the sender resume at `written`) or bytes already here
        part = chunk.data[self.written - chunk.offset:]
        self._file.write(part)
        self._hasher.update(part)
        self.written += len(part)
        return self.written == self.size and self._finish(chunk.digest)

    def discard(self) -> None:
        self._reset()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _start(self, chunk: Chunk) -> None:
        self._reset()
        self._file = open(self.path, "wb", opener=private_opener)
        self.id, self.size, self.written = chunk.snapshot_id, chunk.size, 0
        self._hasher = hashlib.sha256()

    def _finish(self, digest: bytes | None) -> bool:
        f, self._file = self._file, None
        ok = digest is not None and hmac.compare_digest(self._hasher.digest(), digest)
        if ok:
            started = self._clock()
            f.flush()
            os.fsync(f.fileno())
            self.sync_s = self._clock() - started
        f.close()
        if not ok:
            self.discard()
            raise SnapshotChunkError("the received snapshot's digest does not match the sender's; discarded")
        self.id, self._hasher = None, None
        return True

    def _reset(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self.id, self.size, self.written, self._hasher = None, 0, 0, None
