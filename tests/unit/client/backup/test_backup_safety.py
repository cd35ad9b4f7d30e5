"""Goal: backups are owner-only, restore and verify never follow a manifest or a link outside the backup, and an
encrypted backup refuses the wrong key (BACKUP_KEY_MISMATCH) and any changed, cut, moved or dropped file
(CORRUPT_BACKUP), before anything reaches a cluster."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from raftbus.client.backup import restore_backup
from raftbus.client.backup.files import BackupFiles, open_backups
from raftbus.client.backup.layout import INDEX, read_index, write_index
from raftbus.client.backup.sealed import HEADER, TAG_BYTES, BackupKey, create_key_file
from raftbus.client.backup.verify import verify_backup
from raftbus.client.errors import BackupKeyMismatch, CorruptBackup, InvalidArgument

from tests.unit.client.backup.builder import batches, full_chain, write_backup

UNREACHABLE = "127.0.0.1:1"  # restore must refuse before it would ever need a cluster


def modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]}


def edit_manifest(root: Path, name: str, change) -> None:
    path = root / name / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def restore_refused(root: Path, key=None) -> CorruptBackup:
    with pytest.raises(CorruptBackup) as caught:
        restore_backup(root, UNREACHABLE, key=key)
    return caught.value


@pytest.mark.parametrize("encrypted", [False, True])
def test_backup_directories_are_0700_and_files_0600(tmp_path, encrypted):
    """Goal: under umask 000, a plain or encrypted backup's directories are 0700 and its files (and key file) 0600."""
    key = create_key_file(tmp_path / "k") if encrypted else None
    old = os.umask(0)  # whatever the operator's umask
    try:
        full_chain(tmp_path / "b", key)
    finally:
        os.umask(old)
    found = modes(tmp_path / "b")
    assert {m for p, m in found.items() if (tmp_path / "b" / p).is_dir()} == {0o700}
    assert {m for p, m in found.items() if (tmp_path / "b" / p).is_file()} == {0o600}
    if encrypted:
        assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o600


@pytest.mark.parametrize("path", ["../../outside.batches", "/etc/passwd", "streams/t/../../../x.batches",
                                  "streams/t/1.batches", "streams/t/0.batches\x00"])
def test_a_manifest_path_other_than_its_own_is_refused(tmp_path, path):
    """Goal: a file path that is not the one its topic and partition give (traversal, absolute, another file)
    fails verification, and restore refuses before contacting any cluster."""
    full_chain(tmp_path)
    (tmp_path.parent / "outside.batches").write_bytes(batches(10, [3, 2]))
    edit_manifest(tmp_path, "0001-full", lambda m: m["streams"]["t"]["0"].update(file=path))
    problems = verify_backup(tmp_path)
    assert len(problems) == 1 and "file is" in problems[0]
    assert "does not verify" in restore_refused(tmp_path).message


@pytest.mark.parametrize("name", ["../evil", "/tmp", "..", "0001-full/../../x"])
def test_index_names_outside_the_directory_are_refused(tmp_path, name):
    """Goal: a backup name in the index that is a path (.., absolute, nested) is CORRUPT_BACKUP for verify and
    restore."""
    full_chain(tmp_path)
    index = json.loads((tmp_path / INDEX).read_text())
    index["backups"][0] = name
    (tmp_path / INDEX).write_text(json.dumps(index))
    with pytest.raises(CorruptBackup, match="not a valid name"):
        verify_backup(tmp_path)
    restore_refused(tmp_path)


def test_topic_names_that_are_paths_are_refused(tmp_path):
    """Goal: a manifest topic named '..' is refused as a name before any path is made of it."""
    full_chain(tmp_path)
    edit_manifest(tmp_path, "0001-full", lambda m: m["streams"].update({"..": m["streams"].pop("t")}))
    assert "not a valid name" in verify_backup(tmp_path)[0]


def test_a_symbolic_link_inside_the_backup_is_not_followed(tmp_path):
    """Goal: a stream folder replaced by a link to elsewhere (holding a plausible file) is refused, not read."""
    full_chain(tmp_path / "b")
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / "b/0001-full/streams").rename(elsewhere)
    (tmp_path / "b/0001-full/streams").symlink_to(elsewhere)
    problems = verify_backup(tmp_path / "b")
    assert problems and all("symbolic link" in p for p in problems[:1])
    assert "symbolic link" in restore_refused(tmp_path / "b").message
    (tmp_path / "b/0001-full/streams").unlink()
    (tmp_path / "b/0001-full/streams").mkdir()
    (tmp_path / "b/0001-full/streams/t").symlink_to(elsewhere / "t")
    assert "symbolic link" in verify_backup(tmp_path / "b")[0]


def test_an_encrypted_chain_verifies_with_its_key_and_holds_no_plaintext(tmp_path):
    """Goal: an encrypted chain verifies with its key, and every file but the index is sealed (no manifest text, no
    path)."""
    key = create_key_file(tmp_path / "k")
    full_chain(tmp_path / "b", key)
    assert verify_backup(tmp_path / "b", BackupKey.load(tmp_path / "k")) == []
    for path in (tmp_path / "b").rglob("*"):
        if path.is_file() and path.name != INDEX:
            data = path.read_bytes()
            assert data.startswith(b"RBSEAL01") and b'"kind"' not in data and b"streams/t" not in data, path


def test_the_wrong_key_or_no_key_is_a_key_mismatch(tmp_path):
    """Goal: another key, no key for an encrypted set, or a key for a plain one are BACKUP_KEY_MISMATCH for verify
    and restore."""
    key = create_key_file(tmp_path / "k")
    other = create_key_file(tmp_path / "other")
    full_chain(tmp_path / "b", key)
    for wrong, text in ((other, "key id"), (None, "give --key-file")):
        with pytest.raises(BackupKeyMismatch, match=text):
            verify_backup(tmp_path / "b", wrong)
        with pytest.raises(BackupKeyMismatch):
            restore_backup(tmp_path / "b", UNREACHABLE, key=wrong)
    full_chain(tmp_path / "plain")
    with pytest.raises(BackupKeyMismatch, match="not encrypted"):
        verify_backup(tmp_path / "plain", key)


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 1
    path.write_bytes(bytes(data))


def test_a_changed_cut_or_moved_encrypted_file_is_corrupt(tmp_path):
    """Goal: AES-GCM catches a flipped bit, a file cut at a chunk boundary and files swapped between paths."""
    key = create_key_file(tmp_path / "k")
    root = tmp_path / "b"
    full_chain(root, key)
    stream = root / "0001-full/streams/t/0.batches"
    original = stream.read_bytes()
    flip(stream, len(original) - 3)
    assert "fails authentication" in verify_backup(root, key)[0]
    whole_chunks = (len(original) - HEADER.size) // (64 + TAG_BYTES)  # the builder seals 64-byte chunks
    assert whole_chunks >= 2
    stream.write_bytes(original[:HEADER.size + (whole_chunks - 1) * (64 + TAG_BYTES)])  # cut at a chunk boundary
    assert "fails authentication" in verify_backup(root, key)[0]
    stream.write_bytes((root / "0002-incremental/streams/t/0.batches").read_bytes())  # another backup's file
    assert "fails authentication" in verify_backup(root, key)[0]
    stream.write_bytes(original)
    assert verify_backup(root, key) == []
    flip(root / "0001-full/manifest.json", 30)
    with pytest.raises(CorruptBackup):
        restore_backup(root, UNREACHABLE, key=key)


def test_an_encrypted_index_cannot_lose_or_gain_a_backup(tmp_path):
    """Goal: dropping the last incremental from backups.json (or renaming one) fails the index's MAC."""
    key = create_key_file(tmp_path / "k")
    full_chain(tmp_path / "b", key)
    index = json.loads((tmp_path / "b" / INDEX).read_text())
    index["backups"] = index["backups"][:1]
    (tmp_path / "b" / INDEX).write_text(json.dumps(index))
    with pytest.raises(CorruptBackup, match="fails authentication"):
        verify_backup(tmp_path / "b", key)


def test_an_incremental_backup_takes_the_key_of_the_set(tmp_path):
    """Goal: continuing an encrypted set with another key is refused; with its key the set opens."""
    key = create_key_file(tmp_path / "k")
    other = create_key_file(tmp_path / "other")
    write_backup(tmp_path / "b", "full", 0, batches(0, [1]), 1, key=key)
    with pytest.raises(BackupKeyMismatch):
        open_backups(tmp_path / "b", other)
    files = open_backups(tmp_path / "b", key)
    assert isinstance(files, BackupFiles) and files.index.encryption["key_id"] == key.key_id


def test_a_key_file_is_never_overwritten_and_a_bad_one_is_named(tmp_path):
    """Goal: create-key never writes over a file, and a file that is not a backup key (or is missing) is
    INVALID_ARGUMENT."""
    key = create_key_file(tmp_path / "k")
    before = (tmp_path / "k").read_bytes()
    with pytest.raises(InvalidArgument, match="never overwritten"):
        create_key_file(tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == before and BackupKey.load(tmp_path / "k") == key
    (tmp_path / "bad").write_text("rbt_not-a-backup-key\n")
    with pytest.raises(InvalidArgument, match="not a raftbus backup key"):
        BackupKey.load(tmp_path / "bad")
    with pytest.raises(InvalidArgument):
        BackupKey.load(tmp_path / "missing")


def test_a_backup_written_before_sets_and_encryption_still_verifies(tmp_path):
    """Goal: an index of the first format (backups only) reads as a plain set."""
    full_chain(tmp_path)
    index = read_index(tmp_path)
    (tmp_path / INDEX).write_text(json.dumps({"format": 1, "backups": index.backups}))
    assert verify_backup(tmp_path) == []
    write_index(tmp_path, index, None)
