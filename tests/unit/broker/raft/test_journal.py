"""Goal: the Raft journal keeps exactly the entries it was told to keep, across reopen, truncation, compaction
(dropped from memory at once, from the file by the group commit's rewrite, which entries appended meanwhile join
and a truncation or close meanwhile abandons) and a torn tail, and never reads another format as its own."""
import os

import pytest

from raftbus.broker.raft import journal as journal_module
from raftbus.broker.raft.journal import MAGIC, RECORD, AppendJournal


def entries(journal):
    return [journal[i] for i in range(len(journal))]


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "raft.journal")


def fill(journal, count, first=1, term=1):
    for idx in range(first, first + count):
        journal.add(f"command-{idx}".encode(), idx, term)


def test_entries_survive_a_reopen_in_order(path):
    journal = AppendJournal(path)
    fill(journal, 5)
    journal.close()
    reopened = AppendJournal(path)
    assert entries(reopened) == [(f"command-{i}".encode(), i, 1) for i in range(1, 6)]
    assert reopened[-1][1] == 5 and reopened[1:3] == entries(reopened)[1:3]


def test_delete_from_truncates_and_later_entries_follow_the_cut(path):
    journal = AppendJournal(path)
    fill(journal, 5)
    journal.delete_from(2)
    journal.add(b"replacement", 3, 2)
    journal.close()
    assert entries(AppendJournal(path)) == [(b"command-1", 1, 1), (b"command-2", 2, 1), (b"replacement", 3, 2)]


def test_delete_to_drops_entries_from_memory_and_the_rewrite_from_the_file(path):
    journal = AppendJournal(path)
    fill(journal, 6)
    journal.delete_to(4)
    assert [e[1] for e in entries(journal)] == [5, 6]
    journal.close()
    assert [e[1] for e in entries(AppendJournal(path))] == [1, 2, 3, 4, 5, 6]  # not rewritten: the core drops them
    journal = AppendJournal(path)
    journal.delete_to(4)
    fill(journal, 1, first=7)
    assert journal.rewrite_compacted() is True and journal.rewrite_compacted() is False
    fill(journal, 1, first=8)
    journal.delete_from(3)  # offsets are the new file's
    journal.close()
    assert [e[1] for e in entries(AppendJournal(path))] == [5, 6, 7]
    assert not os.path.exists(path + ".compact")


def _during_the_rewrite(monkeypatch, journal, action):
    """Run `action` once, while the rewrite fsyncs the new file (outside the journal's lock)."""
    real_fsync, done = os.fsync, []

    def fsync(fd):
        if not done:
            done.append(True)
            action(journal)
        real_fsync(fd)

    monkeypatch.setattr(journal_module.os, "fsync", fsync)


def test_entries_appended_and_compacted_during_the_rewrite_are_kept_and_dropped(path, monkeypatch):
    journal = AppendJournal(path)
    fill(journal, 6)
    journal.delete_to(2)
    _during_the_rewrite(monkeypatch, journal, lambda j: (fill(j, 2, first=7), j.delete_to(1)))
    assert journal.rewrite_compacted() is True
    assert [e[1] for e in entries(journal)] == [4, 5, 6, 7, 8]
    monkeypatch.undo()
    journal.close()
    assert [e[1] for e in entries(AppendJournal(path))] == [3, 4, 5, 6, 7, 8]  # 3 goes at the next rewrite
    journal = AppendJournal(path)
    journal.delete_to(1)
    assert journal.rewrite_compacted() is True
    journal.close()
    assert [e[1] for e in entries(AppendJournal(path))] == [4, 5, 6, 7, 8]


@pytest.mark.parametrize("meanwhile", ["truncate", "compact past the copy", "close"])
def test_a_rewrite_meeting_a_truncation_or_a_close_leaves_the_file_as_it_was(path, monkeypatch, meanwhile):
    journal = AppendJournal(path)
    fill(journal, 6)
    journal.delete_to(2)
    action = {"truncate": lambda j: (j.delete_from(2), fill(j, 1, first=5, term=2)),
              "compact past the copy": lambda j: (fill(j, 2, first=7), j.delete_to(5)),
              "close": lambda j: j.close()}[meanwhile]
    _during_the_rewrite(monkeypatch, journal, action)
    assert journal.rewrite_compacted() is False
    monkeypatch.undo()
    assert not os.path.exists(path + ".compact")
    held = [e[:2] for e in entries(journal)]
    journal.close()
    on_disk = entries(AppendJournal(path))
    assert on_disk[0][1] == 1 and [e[:2] for e in on_disk][-len(held):] == held
    if meanwhile != "close":
        journal = AppendJournal(path)
        journal.delete_to(len(on_disk) - len(held))
        assert journal.rewrite_compacted() is True  # the next round does it
        journal.close()
        assert [e[:2] for e in entries(AppendJournal(path))] == held


def test_a_torn_or_corrupt_tail_is_cut_at_the_last_good_entry(path):
    journal = AppendJournal(path)
    fill(journal, 3)
    journal.close()
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(RECORD.pack(100, 4, 1, 0) + b"half")  # torn: shorter than it claims
    assert [e[1] for e in entries(AppendJournal(path))] == [1, 2, 3]
    assert os.path.getsize(path) == size
    with open(path, "r+b") as f:  # flip a byte inside the last entry: its CRC no longer matches
        f.seek(size - 1)
        f.write(b"X")
    reopened = AppendJournal(path)
    assert [e[1] for e in entries(reopened)] == [1, 2]
    reopened.add(b"next", 3, 1)
    reopened.close()
    assert entries(AppendJournal(path))[-1] == (b"next", 3, 1)


def test_a_file_of_another_format_is_refused_not_overwritten(path):
    with open(path, "wb") as f:
        f.write(b"PYSYNCOBJ" + bytes(100))
    with pytest.raises(ValueError, match="not a raftbus journal"):
        AppendJournal(path)
    with open(path, "rb") as f:
        assert f.read(9) == b"PYSYNCOBJ"


def test_term_and_vote_are_stored_and_reloaded(path):
    journal = AppendJournal(path)
    journal.set_term(7, "2")
    journal.set_commit_index(42)
    journal.save_meta()
    journal.close()
    reopened = AppendJournal(path)
    assert (reopened.current_term, reopened.voted_for, reopened.commit_index) == (7, "2", 42)
    with open(path, "rb") as f:
        assert f.read(len(MAGIC)) == MAGIC


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_damage_to_an_fsynced_record_is_corruption_not_a_torn_tail(path):
    """A record the group commit had fsynced that no longer checks out is reported, never silently cut with
    everything after it."""
    from raftbus.broker.raft.journal import JournalCorrupt

    journal = AppendJournal(path)
    fill(journal, 5)
    journal.flush()
    journal.mark_synced(journal.sync_point())
    second = journal._offsets[1]
    journal.close()
    flip_byte(path, second + RECORD.size + 2)
    with pytest.raises(JournalCorrupt, match="fsynced through index 5"):
        AppendJournal(path)
    assert os.path.getsize(path) > second + RECORD.size  # nothing was cut


def test_damage_to_the_first_fsynced_record_is_corruption_too(path):
    from raftbus.broker.raft.journal import JournalCorrupt

    journal = AppendJournal(path)
    fill(journal, 2)
    journal.mark_synced(journal.sync_point())
    journal.close()
    flip_byte(path, len(MAGIC) + RECORD.size)
    with pytest.raises(JournalCorrupt):
        AppendJournal(path)


def test_damage_after_the_last_fsync_is_a_torn_tail_and_is_cut(path):
    journal = AppendJournal(path)
    fill(journal, 3)
    journal.mark_synced(journal.sync_point())
    fill(journal, 2, first=4)  # written after the last fsync
    fourth = journal._offsets[3]
    journal.close()
    flip_byte(path, fourth + RECORD.size + 1)
    assert [e[1] for e in entries(AppendJournal(path))] == [1, 2, 3]


def test_a_truncation_below_the_mark_lowers_it_and_a_stale_mark_is_ignored(path):
    journal = AppendJournal(path)
    fill(journal, 5)
    point = journal.sync_point()
    journal.delete_from(2)  # index 3 onwards replaced while the fsync ran
    journal.mark_synced(point)
    fill(journal, 1, first=3, term=2)
    third = journal._offsets[2]
    journal.close()
    flip_byte(path, third + RECORD.size + 1)
    assert [e[1] for e in entries(AppendJournal(path))] == [1, 2]


def test_a_truncation_while_the_fsync_runs_still_marks_the_records_it_kept(path):
    """Records below a truncation that raced the fsync were on disk before it began: they stay marked, so damage
    to them is still reported as corruption (a follower that truncates often must not leave its mark behind)."""
    from raftbus.broker.raft.journal import JournalCorrupt, read_synced_index

    journal = AppendJournal(path)
    fill(journal, 5)
    point = journal.sync_point()
    journal.delete_from(3)  # index 4 onwards replaced while the fsync ran
    fill(journal, 2, first=4, term=2)
    journal.mark_synced(point)
    assert read_synced_index(path) == 3
    second = journal._offsets[1]
    journal.close()
    flip_byte(path, second + RECORD.size + 1)
    with pytest.raises(JournalCorrupt, match="fsynced through index 3"):
        AppendJournal(path)


def test_a_truncation_above_the_sync_point_leaves_the_whole_point_marked(path):
    from raftbus.broker.raft.journal import read_synced_index

    journal = AppendJournal(path)
    fill(journal, 3)
    point = journal.sync_point()
    fill(journal, 3, first=4)  # written after the fsync began
    journal.delete_from(4)  # index 5 onwards replaced: above the point
    journal.mark_synced(point)
    assert read_synced_index(path) == 3
    journal.mark_synced(journal.sync_point())
    assert read_synced_index(path) == 4


def test_an_append_does_not_wait_for_a_group_commit_fsync_in_progress(path, monkeypatch):
    """The group commit's fsync of a journal can take as long as an election timeout under heavy writes; the Raft
    loop's appends go on meanwhile (they only wait for the descriptor, never for the disk)."""
    import threading

    from raftbus.broker.raft import journal as journal_module

    journal = AppendJournal(path)
    journal.add(b"command-1", 1, 1)
    in_fsync, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd):
        if threading.current_thread() is syncing:  # the group commit's fsync; any other thread's is left alone
            in_fsync.set()
            assert release.wait(10)
        real_fsync(fd)

    syncing = threading.Thread(target=journal.fsync_open)
    monkeypatch.setattr(journal_module.os, "fsync", slow_fsync)
    syncing.start()
    try:
        assert in_fsync.wait(10)
        appended = threading.Event()
        appender = threading.Thread(target=lambda: (journal.add(b"command-2", 2, 1), appended.set()))
        appender.start()
        assert appended.wait(5), "the append waited for the fsync"
    finally:
        release.set()
        syncing.join(10)
    monkeypatch.setattr(journal_module.os, "fsync", real_fsync)
    assert entries(AppendJournal(path)) == [(b"command-1", 1, 1), (b"command-2", 2, 1)]


def held_in_memory(journal):
    """Positions whose command the journal holds in memory (a released entry holds None there)."""
    return [position for position, entry in enumerate(journal._entries) if entry[0] is not None]


def test_released_entries_leave_memory_and_read_back_unchanged(path):
    journal = AppendJournal(path)
    fill(journal, 10)
    expected = entries(journal)
    before = journal.resident_bytes
    released = journal.release_through(9)
    assert held_in_memory(journal) == [0, 8, 9]  # the first entry and the last two stay
    assert released == sum(len(e[0]) for e in expected[1:8]) and journal.resident_bytes == before - released
    assert entries(journal) == expected and journal[2:9] == expected[2:9] and journal[-3] == expected[-3]
    assert journal[:] == expected and journal[5:5] == []
    assert journal.release_through(9) == 0  # released once
    journal.close()
    assert entries(AppendJournal(path)) == expected


def test_a_compaction_and_its_rewrite_keep_released_entries_readable(path):
    journal = AppendJournal(path)
    fill(journal, 10)
    expected = entries(journal)
    journal.release_through(8)
    journal.delete_to(3)  # the new first entry (index 4) was released: it is held again
    assert held_in_memory(journal)[0] == 0 and entries(journal) == expected[3:]
    fill(journal, 2, first=11)
    assert journal.rewrite_compacted() is True  # records copied from the old file, released ones too
    assert entries(journal) == expected[3:] + [(b"command-11", 11, 1), (b"command-12", 12, 1)]
    journal.release_through(12)
    assert entries(journal)[1:4] == expected[4:7]  # offsets are the new file's
    journal.close()
    assert [e[1] for e in entries(AppendJournal(path))] == list(range(4, 13))


def test_released_entries_appended_to_during_the_rewrite_read_back(path, monkeypatch):
    journal = AppendJournal(path)
    fill(journal, 8)
    journal.release_through(6)
    journal.delete_to(2)
    _during_the_rewrite(monkeypatch, journal, lambda j: (fill(j, 2, first=9), j.release_through(9)))
    assert journal.rewrite_compacted() is True
    monkeypatch.undo()
    assert [e[1] for e in entries(journal)] == list(range(3, 11))
    assert entries(journal)[1] == (b"command-4", 4, 1) and entries(journal)[-1] == (b"command-10", 10, 1)


def test_a_truncation_holds_the_new_tail_in_memory_again(path):
    journal = AppendJournal(path)
    fill(journal, 10)
    journal.release_through(8)
    journal.delete_from(5)  # entries 1..5 left; 4 and 5 were released
    assert held_in_memory(journal) == [0, 3, 4]
    assert journal.resident_bytes == sum(len(e[0]) for e in journal._entries if e[0] is not None)
    journal.add(b"replacement", 6, 2)
    assert journal[-2] == (b"command-5", 5, 1) and journal[-1] == (b"replacement", 6, 2)
    journal.clear()
    assert journal.resident_bytes == 0 and len(journal) == 0


def test_a_parked_journal_reads_released_entries_by_opening_its_file(path):
    journal = AppendJournal(path)
    fill(journal, 6)
    journal.release_through(6)
    assert journal.park() is True and journal.parked
    assert journal[2] == (b"command-3", 3, 1)
    assert not journal.parked


def test_a_released_record_changed_on_disk_reads_as_corruption(path):
    journal = AppendJournal(path)
    fill(journal, 6)
    journal.release_through(6)
    offset = journal._offsets[2] + RECORD.size
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"X")
    with pytest.raises(journal_module.JournalCorrupt):
        journal[2]
    assert journal[1] == (b"command-2", 2, 1)


def test_command_lengths_are_known_without_reading_released_entries(path, monkeypatch):
    journal = AppendJournal(path)
    for idx in range(1, 9):
        journal.add(b"c" * idx * 10, idx, 1)
    journal.release_through(8)

    def no_read(*args):
        raise AssertionError("read the file")

    monkeypatch.setattr(journal_module.os, "pread", no_read)
    assert [journal.command_bytes(p) for p in range(8)] == [idx * 10 for idx in range(1, 9)]
