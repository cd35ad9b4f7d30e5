"""Unit tests of owner-only data files: directories made 0700 at every level, files 0600 whatever the umask, and a
data directory written with looser modes tightened without following symbolic links."""
from __future__ import annotations

import os
import stat

from raftbus.broker.storage.private import private_data_dir, private_dir, private_opener, restrict_umask


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_new_directories_and_files_are_owner_only_under_a_loose_umask(tmp_path):
    """Goal: with umask 000, private_dir and private_opener still create 0700 directories and 0600 files."""
    old = os.umask(0)
    try:
        made = private_dir(tmp_path / "a" / "b" / "c")
        with open(made / "f", "wb", opener=private_opener) as f:
            f.write(b"x")
    finally:
        os.umask(old)
    assert [mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")] == [0o700] * 3
    assert mode(made / "f") == 0o600


def test_a_loose_data_directory_is_tightened_and_links_are_left_alone(tmp_path):
    """Goal: an older data dir (0755 dirs, 0644 files) becomes owner-only; a symlink's target outside is untouched."""
    data = tmp_path / "data"
    (data / "partitions" / "t-0").mkdir(parents=True, mode=0o755)
    os.chmod(data, 0o755)
    os.chmod(data / "partitions", 0o755)
    (data / "partitions" / "t-0" / "raft.journal").write_bytes(b"j")
    os.chmod(data / "partitions" / "t-0" / "raft.journal", 0o644)
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours")
    os.chmod(outside, 0o644)
    (data / "link").symlink_to(outside)
    private_data_dir(data)
    assert mode(data) == mode(data / "partitions") == mode(data / "partitions" / "t-0") == 0o700
    assert mode(data / "partitions" / "t-0" / "raft.journal") == 0o600
    assert mode(outside) == 0o644


def test_the_process_umask_becomes_owner_only(tmp_path):
    """Goal: after restrict_umask, a file created by any library call is 0600 and a directory 0700."""
    old = restrict_umask()
    try:
        (tmp_path / "lib-file").write_text("x")
        (tmp_path / "lib-dir").mkdir()
    finally:
        os.umask(old)
    assert (mode(tmp_path / "lib-file"), mode(tmp_path / "lib-dir")) == (0o600, 0o700)


def test_a_data_dir_that_is_a_link_has_its_target_made_private(tmp_path):
    """Goal: a data dir given as a symbolic link to a directory makes that directory 0700, and keeps the link."""
    target = tmp_path / "disk" / "raftbus"
    target.mkdir(parents=True)
    os.chmod(target, 0o755)
    (tmp_path / "data").symlink_to(target)
    private_data_dir(tmp_path / "data")
    assert mode(target) == 0o700 and (tmp_path / "data").is_symlink()
