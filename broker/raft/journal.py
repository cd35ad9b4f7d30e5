"""The Raft journal of one group: an append-only file of log entries, written with one `writev` per entry.

`AppendJournal` keeps the entries in memory (the Raft core indexes and slices them directly) and writes each
entry once, with its header, by `os.pwritev`; it is the journal the Raft core (`broker/raft/pysyncobj/`) is
given: `add`, `clear`, `delete_from`, `delete_to`, indexing, and the term, vote and commit index below.

File format (integers big-endian):
    header  = b"RBJRNL01"
    record  = length >I (of command) | index >Q | term >Q | crc32 >I (of index, term, command) | command
On open, records are read until the first one that is truncated or fails its CRC. Where that record lies tells
a torn tail from corruption: `<file>.synced` holds the last index the group commit fsynced (written after the
fsync). A bad record after it is a torn tail (a crash or power loss mid-write, whose pages may also have
reached the disk out of order): the file is cut there. A bad record at or below it was on disk intact and
has rotted since: opening raises `JournalCorrupt` and the group does not start (a replica that silently
dropped acknowledged entries could vote itself, or another stale replica, into losing them). `delete_from`
truncates at a recorded offset.

Compaction is split so that the Raft loop never waits for a disk flush: `delete_to` drops the entries from memory
only, and the group-commit thread (`rewrite_compacted`, before its fsync of the journal) writes the entries held
to a new file, fsyncs it, renames it over the old one and fsyncs the directory. A crash leaves either the old
journal or the new one, never a mix; a journal opened before its rewrite still holds the dropped entries, which the
Raft core drops again against its snapshot (`RaftNode._load_snapshot`). The rewrite writes most of the file
outside `_fd_lock`; only the entries appended meanwhile, the rename and the switch of descriptor happen under it.
A truncation meanwhile (`delete_from`, `clear`) abandons the rewrite until the next round.

Term, vote and commit index live beside it in `<file>.meta` (`DurableMetaStorer`, `meta_slots`).
Durability: writes reach the page cache; the group-commit thread fsyncs the file (`RaftGroup.sync` through
`fsync_open`) and then writes the mark in place (8 bytes at offset 0 of `<file>.synced`). Both go through
descriptors the journal keeps open, so a group commit opens no file: a process out of descriptors (EMFILE) still
makes its journals durable.

Entries are held in memory from their append until they are released (`release_through`): the group releases
those applied here and held by every live follower (`RaftNode.release_point`), once a housekeeping round. A released
entry keeps its index and term in memory and its command only in the file; reading it (a follower that was away, a
snapshot's footer) reads its records back with one `pread`, their CRCs checked. The first entry and the last
`RESIDENT_TAIL` stay in memory, so the core's first and last index and term never read the file. A compaction's
rewrite copies the records' bytes from the old file to the new one (`copy_file_range`), released or not.

With a budget (broker/storage/open_files.py) an idle journal may be parked: fsynced, then its files closed, opened
again by the next write or read. A parked journal has nothing left to fsync.
"""
from __future__ import annotations

import os
import struct
import threading

from isal.isal_zlib import crc32  # zlib's CRC-32 (same values), with carry-less multiply

from raftbus.broker.raft import durable_meta, meta_slots
from raftbus.broker.storage.open_files import OpenBudget, next_use
from raftbus.broker.storage.private import FILE_MODE, private_opener

MAGIC = b"RBJRNL01"
RECORD = struct.Struct(">IQQI")
_INDEX_TERM = struct.Struct(">QQ")
_SYNCED = struct.Struct(">Q")
READ_CHUNK_BYTES = 1 << 20
RESIDENT_TAIL = 2  # the last entries never released: the core reads the last index and term all the time


def _crc(index: int, term: int, command) -> int:
    return crc32(command, crc32(_INDEX_TERM.pack(index, term)))


def _copy_range(source: int, target: int, begin: int, end: int, at: int) -> None:
    """Copy bytes [begin, end) of file `source` to file `target` at `at`; _Abandoned when the source is shorter
    (truncated meanwhile)."""
    while begin < end:
        try:
            copied = os.copy_file_range(source, target, end - begin, begin, at)
        except OSError:  # a filesystem without it: through a buffer
            data = os.pread(source, min(end - begin, READ_CHUNK_BYTES), begin)
            copied = os.pwrite(target, data, at) if data else 0
        if copied <= 0:
            raise _Abandoned
        begin += copied
        at += copied


def _held_bytes(entries: list, first: int, stop: int) -> int:
    """Bytes of the commands held in memory among entries[first:stop]."""
    return sum(len(entry[0]) for entry in entries[first:stop] if entry[0] is not None)


class _Abandoned(Exception):
    """A compaction's rewrite met a truncation, a park or a close: the journal keeps its file."""


class JournalCorrupt(ValueError):
    """A journal record that had been fsynced fails its CRC or is cut short: the disk lost or changed it."""


def read_synced_index(path: str) -> int:
    """The last index the group commit fsynced (`<journal>.synced`), 0 when never recorded."""
    try:
        with open(path + ".synced", "rb") as f:
            data = f.read(_SYNCED.size)
    except FileNotFoundError:
        return 0
    return _SYNCED.unpack(data)[0] if len(data) == _SYNCED.size else 0


def read_entries(path: str, synced_index: int = 0) -> tuple[list, list[int], int]:
    """(entries, their file offsets, end of the last valid record) of a journal file; a missing or empty file
    reads as empty, a file of another format raises ValueError, a bad record at or below `synced_index`
    raises JournalCorrupt."""
    entries: list = []
    offsets: list[int] = []
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return entries, offsets, len(MAGIC)
    if not data:
        return entries, offsets, len(MAGIC)
    if not data.startswith(MAGIC):
        raise ValueError(f"{path} is not a raftbus journal (no {MAGIC!r} header); refusing to overwrite it")
    view = memoryview(data)
    position = len(MAGIC)
    while position < len(data):
        record = _record_at(view, position)
        if record is None:
            _check_torn_tail(path, entries, position, synced_index)
            break
        command, index, term, end = record
        entries.append((command, index, term))
        offsets.append(position)
        position = end
    return entries, offsets, position


def _record_at(view, position: int):
    """(command, index, term, end) of the record at `position`, None when it is cut short or fails its CRC."""
    if position + RECORD.size > len(view):
        return None
    length, index, term, crc = RECORD.unpack_from(view, position)
    end = position + RECORD.size + length
    if end > len(view):
        return None
    command = bytes(view[position + RECORD.size:end])
    if _crc(index, term, command) != crc:
        return None
    return command, index, term, end


def _check_torn_tail(path: str, entries: list, position: int, synced_index: int) -> None:
    last_index = entries[-1][1] if entries else 0
    if last_index < synced_index:
        raise JournalCorrupt(
            f"{path}: the record after index {last_index} (byte {position}) is damaged, but the journal was "
            f"fsynced through index {synced_index}: the disk lost or changed written data. The group is not "
            f"started; remove its directory to rebuild this replica from the leader")

class DurableMetaStorer:
    """A group's term, vote and commit index, in two slots overwritten in place (`meta_slots`), made durable
    whenever the term or the vote changes.

    After a power loss a replica must not forget a vote it granted (it could vote twice in one term, which Raft
    forbids). Term and vote change only at elections, so they are made durable then: on the Raft loop by the
    pass's batched sync before it sends anything (`durable_meta`), elsewhere by an fsync at once. The commit index,
    saved at most once a second, is only a hint and is not synced on its own.
    """

    def __init__(self, path):
        self._slots = meta_slots.SlotFile(path)
        self._durable_vote = object()

    def load(self) -> dict:
        return dict(self._slots.meta)

    def close_file(self, *, wait: bool = True) -> None:
        self._slots.close(wait=wait)

    def store(self, meta: dict) -> None:
        vote = (meta.get("currentTerm"), meta.get("votedForNodeId"))
        durable = vote != self._durable_vote
        created = not self._slots.on_disk
        self._slots.write(meta)
        if not durable:
            return
        self._durable_vote = vote
        deferred = durable_meta.current()
        if deferred is not None:  # made durable before the loop sends anything (durable_meta.py)
            deferred.add(self._slots, created=created)
            return
        self._slots.sync_data()
        if created:
            durable_meta.fsync_path(os.path.dirname(self._slots.path) or ".")


class AppendJournal:
    """A group's Raft log over an append-only file (see the module docstring)."""

    def __init__(self, path: str):
        self._path = str(path)
        self._synced_index = read_synced_index(self._path)
        self._synced_lock = threading.Lock()  # the group commit marks, the loop thread truncates
        self._kept_since_sync_point: int | None = None  # the lowest last-kept index of a truncation since then
        self._entries, self._offsets, end = read_entries(self._path, self._synced_index)
        # entries at positions [1, _released_end) hold None for their command: it is in the file only
        self._released_end = 1
        self._resident_bytes = sum(len(entry[0]) for entry in self._entries)
        # a budget may park the file, and the group commit rewrite it, from other threads: the descriptor, the
        # entries, their offsets and the end change together under this lock
        self._fd_lock = threading.Lock()
        self._compacted = False  # the file still holds entries `delete_to` dropped: `rewrite_compacted` is due
        self._truncations = 0  # delete_from and clear so far: a rewrite that saw another count is abandoned
        self._fd = self._open(end)  # -1 while parked or once destroyed
        self._synced_fd = -1  # `<file>.synced`, opened at the first mark; closed with the journal or when parked
        self._destroyed = False
        self._budget: OpenBudget | None = None
        self.last_used = next_use()
        self._end = end
        self._meta_storer = DurableMetaStorer(self._path + ".meta")
        self._meta = self._meta_storer.load()
        self._meta_saved = True

    def _open(self, valid_end: int) -> int:
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        size = os.fstat(fd).st_size
        if size < len(MAGIC):
            os.ftruncate(fd, 0)
            os.pwrite(fd, MAGIC, 0)
        elif size > valid_end:
            os.ftruncate(fd, valid_end)  # drop a torn or foreign tail
        return fd

    # ------------------------------------------------------------------ parking (open_files.py)
    def attach_budget(self, budget: OpenBudget) -> None:
        with self._fd_lock:
            self._budget = budget
            if self._fd >= 0:
                budget.opened(self)

    @property
    def parked(self) -> bool:
        return self._fd < 0 and not self._destroyed

    def park(self) -> bool:
        """Close the file unless a write holds it now (never waits); True once parked."""
        if not self._fd_lock.acquire(blocking=False):
            return False
        try:
            if self._destroyed:
                return False
            if self._fd >= 0:
                os.fsync(self._fd)  # what a parked journal holds is on disk: the group commit skips it
                os.close(self._fd)
                self._fd = -1
                if self._budget is not None:
                    self._budget.parked(self)
                self._meta_storer.close_file(wait=False)  # one being written keeps its file until next time
                if self._synced_lock.acquire(blocking=False):  # a mark being written keeps its file until next time
                    try:
                        if self.last_index > self._synced_index:  # all of it was just fsynced
                            self._write_synced(self.last_index, durable=False)
                        self._close_synced_file()
                    finally:
                        self._synced_lock.release()
            return True
        finally:
            self._fd_lock.release()

    def _file(self) -> int:
        """The open file (reopened when parked); caller holds `_fd_lock`."""
        if self._fd < 0:
            if self._destroyed:
                raise OSError(f"journal {self._path} is closed")
            self._fd = os.open(self._path, os.O_RDWR)
            if self._budget is not None:
                self._budget.opened(self, reopened=True)
        self.last_used = next_use()
        return self._fd

    # ------------------------------------------------------------------ entries
    def add(self, command: bytes, idx: int, term: int) -> None:
        if type(command) is not bytes:
            command = bytes(command)
        header = RECORD.pack(len(command), idx, term, _crc(idx, term, command))
        with self._fd_lock:
            written = os.pwritev(self._file(), [header, command], self._end)
            if written != len(header) + len(command):
                raise OSError(f"short journal write to {self._path}: {written} bytes")
            self._entries.append((command, idx, term))
            self._offsets.append(self._end)
            self._end += written
            self._resident_bytes += len(command)

    def _lower_synced(self, index: int) -> None:
        """Entries above `index` are being replaced and are not fsynced yet: lower the mark first, durably, so a
        crash never finds a mark covering records that are not on disk."""
        index = max(index, 0)
        with self._synced_lock:
            if self._kept_since_sync_point is not None:
                self._kept_since_sync_point = min(self._kept_since_sync_point, index)
            if index < self._synced_index:
                self._write_synced(index, durable=True)

    def clear(self):
        self._lower_synced(0)
        with self._fd_lock:
            self._truncations += 1
            self._compacted = False
            self._entries = []
            self._offsets = []
            self._released_end = 1
            self._resident_bytes = 0
            self._end = len(MAGIC)
            os.ftruncate(self._file(), self._end)

    def sync_point(self) -> int:
        """Taken before an fsync of the file: the last index written so far."""
        with self._synced_lock:
            self._kept_since_sync_point = self.last_index
            return self.last_index

    def mark_synced(self, point: int) -> None:
        """Record, after the fsync, that the file is on disk through `point`, or through the last index a
        truncation kept if one ran meanwhile: records above it may have been replaced after the fsync began,
        records up to it were written before and untouched. A truncation above `point` costs nothing: the
        records the fsync covered stay marked."""
        with self._synced_lock:
            kept = self._kept_since_sync_point
            self._kept_since_sync_point = None
            index = point if kept is None else min(point, kept)
            if index > self._synced_index and not (self._fd < 0 and self._synced_fd < 0):  # parked: marked then
                self._write_synced(index, durable=False)

    def _write_synced(self, index: int, *, durable: bool) -> None:
        """Write the mark in place (caller holds `_synced_lock`): 8 bytes at offset 0, within one disk sector, so a
        crash leaves the old mark or the new one."""
        self._synced_index = index
        if self._synced_fd < 0:
            self._synced_fd = private_opener(self._path + ".synced", os.O_RDWR | os.O_CREAT)
        os.pwrite(self._synced_fd, _SYNCED.pack(index), 0)
        if durable:
            os.fsync(self._synced_fd)

    def _close_synced_file(self) -> None:
        if self._synced_fd >= 0:
            os.close(self._synced_fd)
            self._synced_fd = -1

    @property
    def last_index(self) -> int:
        return self._entries[-1][1] if self._entries else 0

    def delete_from(self, position: int) -> None:
        """Drop the entries from `position` (in the list held) on."""
        if position >= len(self._entries):
            return
        self._lower_synced(self._entries[position][1] - 1)
        with self._fd_lock:
            self._truncations += 1
            self._resident_bytes -= _held_bytes(self._entries, position, len(self._entries))
            end = self._offsets[position]
            os.ftruncate(self._file(), end)
            del self._entries[position:]
            del self._offsets[position:]
            self._end = end
            self._restore_tail()

    def delete_to(self, position: int) -> None:
        """Drop the entries before `position` (compaction), from memory: the group commit rewrites the file
        (`rewrite_compacted`)."""
        if position <= 0:
            return
        with self._fd_lock:
            entries = self._entries
            self._resident_bytes -= _held_bytes(entries, 0, min(position, len(entries)))
            if 1 <= position < self._released_end:  # the new first entry is held again
                entries[position] = self._read_locked(position, position + 1)[0]
                self._resident_bytes += len(entries[position][0])
            self._released_end = max(1, self._released_end - position)
            del entries[:position]
            del self._offsets[:position]
            self._compacted = True

    # ------------------------------------------------------------------ released entries (module docstring)
    def release_through(self, index: int) -> int:
        """Drop from memory the commands of the entries up to `index`, but the first and the last RESIDENT_TAIL:
        they are read back from the file when asked for. Bytes released."""
        with self._fd_lock:
            entries = self._entries
            if not entries:
                return 0
            stop = min(index - entries[0][1] + 1, len(entries) - RESIDENT_TAIL)
            released = 0
            for position in range(self._released_end, stop):
                command, idx, term = entries[position]
                released += len(command)
                entries[position] = (None, idx, term)
            if stop > self._released_end:
                self._released_end = stop
            self._resident_bytes -= released
            return released

    @property
    def resident_bytes(self) -> int:
        """Bytes of commands held in memory (entries appended and not released, compacted or truncated)."""
        return self._resident_bytes

    def command_bytes(self, position: int) -> int:
        """The length of the command at `position`, never read from the file."""
        command = self._entries[position][0]
        if command is not None:
            return len(command)
        offsets = self._offsets  # one list: a rewrite swaps it whole; a released entry is never the last
        return offsets[position + 1] - offsets[position] - RECORD.size

    def _restore_tail(self) -> None:
        """After a truncation, read back released entries that are now among the last RESIDENT_TAIL (caller holds
        `_fd_lock`)."""
        entries = self._entries
        keep_from = max(1, len(entries) - RESIDENT_TAIL)
        stop = min(self._released_end, len(entries))
        if keep_from < stop:
            for offset, entry in enumerate(self._read_locked(keep_from, stop)):
                entries[keep_from + offset] = entry
                self._resident_bytes += len(entry[0])
        self._released_end = min(self._released_end, keep_from)

    def _read_locked(self, first: int, stop: int) -> list:
        """The entries at positions [first, stop), read from the file with one pread (caller holds `_fd_lock`)."""
        offsets = self._offsets
        begin = offsets[first]
        end = offsets[stop] if stop < len(offsets) else self._end
        data = os.pread(self._file(), end - begin, begin)
        view, position, entries = memoryview(data), 0, []
        for _ in range(stop - first):
            record = _record_at(view, position)
            if record is None:
                raise JournalCorrupt(f"{self._path}: the record at byte {begin + position} no longer reads back "
                                     f"(cut short or failing its CRC): the disk lost or changed written data")
            command, idx, term, position = record
            entries.append((command, idx, term))
        return entries

    def _read_released(self, first: int, stop: int) -> list:
        with self._fd_lock:
            return self._read_locked(first, stop)

    def rewrite_compacted(self) -> bool:
        """Write the file again without the entries `delete_to` dropped: the records held are copied to a new file,
        which is fsynced, renamed over the journal, and the directory fsynced (group-commit thread; see the module
        docstring). Whether it rewrote: not for a journal with nothing dropped, parked (its next round after a
        write does it), closed, or truncated meanwhile (the next round tries again)."""
        with self._fd_lock:
            if not self._compacted or self._fd < 0 or self._destroyed:
                return False
            source = os.dup(self._fd)  # read outside the lock; a park meanwhile does not close it
            kept_offsets, kept_end, truncations = list(self._offsets), self._end, self._truncations
            kept_last = self.last_index
        staging = self._path + ".compact"
        fd = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        old_fd = -1
        try:
            os.pwrite(fd, MAGIC, 0)
            begin = kept_offsets[0] if kept_offsets else kept_end
            _copy_range(source, fd, begin, kept_end, len(MAGIC))
            shift = begin - len(MAGIC)
            end = kept_end - shift
            os.fsync(fd)
            with self._fd_lock:
                # the records held now: those of the copy a later compaction left, then those appended since (a
                # later compaction past the end of the copy leaves nothing to join them to: the next round rewrites)
                entries = self._entries
                if self._truncations != truncations or self._fd < 0 or self._destroyed or \
                        (kept_offsets and (not entries or entries[0][1] > kept_last + 1)):
                    raise _Abandoned
                appended = self.last_index - kept_last if kept_offsets else len(entries)
                more = self._offsets[len(entries) - appended:]
                _copy_range(source, fd, kept_end, self._end, end)
                offsets = [offset - shift for offset in kept_offsets] + [offset - shift for offset in more]
                end += self._end - kept_end
                dropped = len(kept_offsets) + appended - len(entries)
                os.replace(staging, self._path)
                old_fd, self._fd, self._offsets, self._end = self._fd, fd, offsets[dropped:], end
                self._compacted = dropped > 0
                self.last_used = next_use()
        except BaseException as exc:
            if old_fd < 0:  # not renamed: the journal goes on with its file
                os.close(fd)
                try:
                    os.unlink(staging)
                except FileNotFoundError:
                    pass
                if isinstance(exc, _Abandoned):
                    return False
            raise
        finally:
            os.close(source)
        try:
            os.close(old_fd)
        except OSError:
            pass
        durable_meta.fsync_path(os.path.dirname(self._path) or ".")  # a power loss must not bring the old file back
        return True

    def __getitem__(self, item):
        entries = self._entries
        if type(item) is int:
            entry = entries[item]
            if entry[0] is None:
                position = item % len(entries)
                return self._read_released(position, position + 1)[0]
            return entry
        start, stop, step = item.indices(len(entries))
        if step != 1:
            raise ValueError("journal slices take no step")
        chunk = entries[start:stop]
        first, last = max(start, 1), min(stop, self._released_end)
        if first < last:
            chunk[first - start:last - start] = self._read_released(first, last)
        return chunk

    def __len__(self):
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        """Bytes of the entries held, with their record headers and the file's header (what the file holds once
        rewritten after a compaction)."""
        offsets = self._offsets
        return self._end - offsets[0] + len(MAGIC) if offsets else len(MAGIC)

    def flush(self):
        with self._fd_lock:
            os.fsync(self._file())

    def fsync_open(self) -> None:
        """fsync the file through the descriptor held (the group commit's path: it opens nothing). A parked journal
        was fsynced when it was parked and nothing was written since (a write reopens it); a closed one is done.

        The fsync runs on a duplicate of the descriptor, outside `_fd_lock`: under heavy writes it can take as long
        as an election timeout, and the Raft loop's appends (`add`) must not wait for it, or every group of the
        broker misses its heartbeats. Everything written before the call is covered, as the caller's sync point
        needs; a parked or closed original does not close the duplicate. Without a descriptor to spare (EMFILE) it
        syncs through the original under the lock."""
        with self._fd_lock:
            if self._fd < 0:
                return
            try:
                fd = os.dup(self._fd)
            except OSError:
                os.fsync(self._fd)
                return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        with self._fd_lock:
            if self._fd < 0 and not self._destroyed:
                try:
                    self._file()  # a parked journal is synced on stop too
                except OSError:
                    pass
            self._destroyed = True
            if self._fd >= 0:
                try:
                    os.fsync(self._fd)  # a clean stop leaves the journal on disk
                except OSError:
                    pass  # a failed group (its disk full or failing) is being closed: what is on disk is what counts
                os.close(self._fd)
                self._fd = -1
            if self._budget is not None:
                self._budget.closed(self)
        with self._synced_lock:
            self._close_synced_file()
        self.save_meta()
        self._meta_storer.close_file()

    # ------------------------------------------------------------------ term, vote, commit index
    def set_commit_index(self, index: int) -> None:
        """Noted on every append; written by `save_meta` (once a second at most) only when it moved."""
        if self._meta.get("raftCommitIndex") != index:
            self._meta["raftCommitIndex"] = index
            self._meta_saved = False

    @property
    def commit_index(self) -> int:
        return self._meta.get("raftCommitIndex", 1)

    def set_term(self, term: int, voted_for: str | None) -> None:
        """Written, and made durable before any message reflecting it is sent (`DurableMetaStorer`)."""
        self._meta["currentTerm"] = term
        self._meta["votedForNodeId"] = voted_for
        self._meta_storer.store(self._meta)
        self._meta_saved = True

    @property
    def current_term(self) -> int:
        return self._meta.get("currentTerm", 0)

    @property
    def voted_for(self) -> str | None:
        return self._meta.get("votedForNodeId", None)

    def save_meta(self) -> None:
        if not self._meta_saved:
            self._meta_storer.store(self._meta)
            self._meta_saved = True
