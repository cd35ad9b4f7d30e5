"""Goal: a snapshot replaced on the Raft loop keeps its old file alive under a second name, so the call frees no
blocks (a synchronous discard on file systems mounted with `discard`); the retirer thread removes that name."""
import os

from raftbus.broker.raft import retire


def _write(path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def test_the_old_file_outlives_the_replace_and_the_retirer_removes_it(tmp_path, monkeypatch):
    dst, src = tmp_path / "raft.snapshot", tmp_path / "raft.snapshot.tmp"
    _write(dst, b"old")
    _write(src, b"new")
    handed = []
    monkeypatch.setattr(retire.RETIRER, "remove", handed.append)
    retire.replace(str(src), str(dst))
    assert dst.read_bytes() == b"new" and not src.exists()
    assert len(handed) == 1 and open(handed[0], "rb").read() == b"old"  # still linked: nothing freed yet
    monkeypatch.undo()
    retire.RETIRER.remove(handed[0])
    assert retire.RETIRER.wait_idle(5)
    assert sorted(os.listdir(tmp_path)) == ["raft.snapshot"]


def test_a_first_snapshot_has_nothing_to_retire(tmp_path, monkeypatch):
    dst, src = tmp_path / "raft.snapshot", tmp_path / "in"
    _write(src, b"first")
    handed = []
    monkeypatch.setattr(retire.RETIRER, "remove", handed.append)
    retire.replace(str(src), str(dst))
    assert dst.read_bytes() == b"first" and handed == []


def test_retired_names_a_crash_left_are_removed_when_the_group_opens_again(tmp_path):
    dst = tmp_path / "raft.snapshot"
    _write(dst, b"kept")
    for name in ("raft.snapshot.retired.11.0", "raft.snapshot.retired.12.3"):
        _write(tmp_path / name, b"left")
    _write(tmp_path / "raft.snapshot.ready", b"not retired")
    retire.remove_retired(str(dst))
    assert retire.RETIRER.wait_idle(5)
    assert sorted(os.listdir(tmp_path)) == ["raft.snapshot", "raft.snapshot.ready"]
