"""The files of the backups in one directory: every path checked to stay inside it, everything created owner-only,
and contents plain or sealed (sealed.py) as the directory's index says.

A path is the backup's name and the file's path in it (`0001-full/streams/orders/0.batches`), made of names only
(letters, digits, '.', '_', '-'; never '.' or '..'), never absolute; no component under the backup directory may
be a symbolic link (CORRUPT_BACKUP otherwise), so a manifest or a planted link cannot make verify or restore
read, or create write, anything outside the directory. Directories are created 0700 and files 0600.
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from raftbus.client.errors import CorruptBackup, InvalidArgument

from raftbus.client.backup.layout import (
    FULL,
    MANIFEST,
    MANIFEST_BYTES_MAX,
    BackupIndex,
    Manifest,
    decode_manifest,
    read_index,
)
from raftbus.client.backup.sealed import BackupKey, SealedWriter, open_sealed

COMPONENT = re.compile(r"[A-Za-z0-9._-]{1,255}")
READ_BYTES = 1 << 20
DIR_MODE, FILE_MODE = 0o700, 0o600


def components(relpath: str) -> list[str]:
    """The names of a path inside the backup directory; CorruptBackup for anything else."""
    parts = relpath.split("/") if isinstance(relpath, str) else []
    if not parts or any(p in (".", "..") or not COMPONENT.fullmatch(p) for p in parts):
        raise CorruptBackup(f"{relpath!r} is not a path inside the backup directory")
    return parts


def private_dirs(path: Path) -> None:
    """Make `path` and its missing parents 0700."""
    missing = []
    for part in (path, *path.parents):
        if part.exists():
            break
        missing.append(part)
    for part in reversed(missing):
        part.mkdir(mode=DIR_MODE, exist_ok=True)


class BackupFiles:
    """Reading and writing the files of one backup directory (see the module docstring)."""

    def __init__(self, root: Path, index: BackupIndex, key: BackupKey | None):
        self.root = Path(root)
        self.index = index
        self.key = key

    def path(self, relpath: str) -> Path:
        """The file at `relpath`: inside the directory, no symbolic link on the way."""
        at = self.root
        for part in components(relpath):
            at = at / part
            if at.is_symlink():
                raise CorruptBackup(f"{relpath}: {at} is a symbolic link (a backup holds none)")
        return at

    @contextmanager
    def writer(self, relpath: str):
        """A new owner-only file at `relpath` (its directories made 0700), plain or sealed; yields an object with
        write()."""
        path = self.path(relpath)
        private_dirs(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
        with os.fdopen(fd, "wb") as out:
            if self.key is None:
                yield out
            else:
                sealed = SealedWriter(out, self.key, self.index.set_id, relpath,
                                      self.index.encryption["chunk_bytes"])
                yield sealed
                sealed.close()
            out.flush()
            os.fsync(out.fileno())

    def write_bytes(self, relpath: str, data: bytes) -> None:
        with self.writer(relpath) as out:
            out.write(data)

    def chunks(self, relpath: str) -> Iterator[bytes]:
        """The plaintext of the file at `relpath`, in pieces; CorruptBackup when missing or not authentic."""
        path = self.path(relpath)
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            raise CorruptBackup(f"{relpath} is missing") from None
        if not stat.S_ISREG(mode):
            raise CorruptBackup(f"{relpath} is not a regular file")
        if self.key is not None:
            yield from open_sealed(path, self.key, self.index.set_id, relpath)
            return
        with open(path, "rb") as f:
            while chunk := f.read(READ_BYTES):
                yield chunk

    def read_bytes(self, relpath: str, bytes_max: int | None = None) -> bytes:
        out = bytearray()
        for chunk in self.chunks(relpath):
            out += chunk
            if bytes_max is not None and len(out) > bytes_max:
                raise CorruptBackup(f"{relpath} is larger than {bytes_max} bytes")
        return bytes(out)

    def manifest(self, name: str) -> Manifest:
        where = f"{name}/{MANIFEST}"
        return decode_manifest(self.read_bytes(where, MANIFEST_BYTES_MAX), where)

    def chain(self) -> list[tuple[str, Manifest]]:
        """Every backup with its manifest, oldest first: a full one, then incrementals, each naming the one before."""
        found = []
        for position, name in enumerate(self.index.backups):
            manifest = self.manifest(name)
            previous = found[-1][0] if found else None
            if (manifest.kind == FULL) != (position == 0) or manifest.previous != previous:
                raise CorruptBackup(f"{name}: a {manifest.kind} backup after {previous!r} naming {manifest.previous!r} "
                                    "(the chain is a full backup, then incrementals, each naming the one before)")
            found.append((name, manifest))
        return found

    def sha256(self, relpath: str) -> str:
        digest = hashlib.sha256()
        for chunk in self.chunks(relpath):
            digest.update(chunk)
        return digest.hexdigest()


def open_backups(root: Path, key: BackupKey | None) -> BackupFiles:
    """The backups already in `root`, with `key` checked against them (InvalidArgument when there are none)."""
    root = Path(root)
    index = read_index(root)
    if index is None or not index.backups:
        raise InvalidArgument(f"{root} holds no raftbus backup (backups.json is missing)")
    index.check_key(key, root)
    return BackupFiles(root, index, key)
