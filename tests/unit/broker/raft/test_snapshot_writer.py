"""Goal: a snapshot file is written whole off the Raft loop — the store copy, then the footer the core checks on
load, fsynced — so handing it to the core is a rename."""
import os
import threading

import pytest

from raftbus.broker.raft import snapshot_footer
from raftbus.broker.raft.snapshots import SnapshotWriter

FOOTER = {"last": (b"c5", 5, 2), "prev": (b"c4", 4, 2), "cluster": ["1", "2", "3"], "data_index": 5,
          "entries": [], "membership": (0, [1, 2, 3], [])}


class _Pinned:
    def __init__(self, data: bytes, fail: bool = False):
        self.data, self.fail, self.closed = data, fail, False
        self.writer_thread = None

    def write_to(self, f) -> None:
        self.writer_thread = threading.current_thread()
        if self.fail:
            raise OSError(28, "No space left on device")
        f.write(self.data)

    def close(self) -> None:
        self.closed = True


def _finish(writer: SnapshotWriter) -> None:
    writer._thread.join(5)
    assert not writer.busy


def test_the_copy_and_its_footer_are_written_and_synced_by_the_writer_thread(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(threading.current_thread()), real_fsync(fd)))
    writer, pinned = SnapshotWriter(tmp_path), _Pinned(b"store-copy")
    writer.start(pinned, FOOTER)
    _finish(writer)
    assert pinned.closed and pinned.writer_thread is not threading.current_thread()
    assert synced and all(thread is not threading.current_thread() for thread in synced)
    assert writer.ready_index == 5 and writer.ready_last == (5, 2)
    with open(writer.ready, "rb") as f:
        footer = snapshot_footer.read_footer(f)
        f.seek(0)
        assert f.read(footer["data_len"]) == b"store-copy"
    assert footer == {**FOOTER, "data_len": len(b"store-copy")}
    assert not writer.partial.exists()


def test_a_failed_copy_leaves_no_ready_snapshot(tmp_path):
    writer, pinned = SnapshotWriter(tmp_path), _Pinned(b"", fail=True)
    writer.start(pinned, FOOTER)
    _finish(writer)
    assert writer.failed and writer.ready_index is None and not writer.ready.exists() and pinned.closed


@pytest.mark.parametrize("stale", ["snapshot.partial", "snapshot.ready"])
def test_a_copy_a_crash_left_is_not_handed_over(tmp_path, stale):
    (tmp_path / stale).write_bytes(b"half")
    writer = SnapshotWriter(tmp_path)
    assert writer.ready_index is None and not (tmp_path / stale).exists()
