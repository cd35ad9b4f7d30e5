"""Owner-only files: a broker's data directory holds records, committed offsets, token hashes and (in a dev cluster)
its secrets, so only the broker's own user may read or list it.

Directories are created 0700 (`private_dir`) and files 0600 (`private_opener`, `FILE_MODE`). A broker or dev
process starts with umask 077 (`restrict_umask`), so files that libraries create behind these calls (pysyncobj,
LMDB's lock file, log files) are owner-only too. A data directory written with looser modes (by an older version,
or copied) is tightened when the broker opens it (`private_data_dir`). See docs/security.md ("Data at rest").
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
UMASK = 0o077


def restrict_umask() -> int:
    """Make every file and directory this process creates from now on owner-only; the previous umask."""
    return os.umask(UMASK)


def private_dir(path) -> Path:
    """`path` as a directory, each missing component created 0700 (Path.mkdir's `mode` covers the last one only)."""
    path = Path(path)
    missing = []
    for part in (path, *path.parents):
        if part.exists():
            break
        missing.append(part)
    for part in reversed(missing):
        try:
            part.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass  # made meanwhile by another thread
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a directory")
    return path


def private_opener(path, flags: int) -> int:
    """An `opener` for open(): the file, when created, is 0600 whatever the umask."""
    return os.open(path, flags, FILE_MODE)


def private_data_dir(path) -> Path:
    """The data directory, made 0700, with every directory and file under it made owner-only (symbolic links under
    it are neither followed nor changed); a data directory already private costs one stat per entry."""
    root = private_dir(path)
    mode = stat.S_IMODE(root.stat().st_mode)  # the directory itself, even when the data dir is a link to it
    if mode & ~DIR_MODE:
        os.chmod(root, mode & DIR_MODE)
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    _tighten(Path(entry.path), DIR_MODE)
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    _tighten(Path(entry.path), FILE_MODE)
    return root


def _tighten(path: Path, allowed: int) -> None:
    mode = stat.S_IMODE(path.lstat().st_mode)
    if mode & ~allowed:
        os.chmod(path, mode & allowed)  # never a symbolic link here: the walk skips them
