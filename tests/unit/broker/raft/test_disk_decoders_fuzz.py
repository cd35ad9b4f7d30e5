"""Property-based fuzz tests of what a broker reads back from disk or receives as a file (Hypothesis): Raft
journal files and snapshot footers, mutated from valid ones or random, give a correct decode or a typed refusal,
within memory proportional to their size and the time bound."""
from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftbus.broker.raft.journal import AppendJournal, JournalCorrupt, read_entries
from raftbus.broker.raft.snapshot_footer import SnapshotFooterError, read_footer, write_footer
from tests.fuzzing import FUZZ, bounded, mutated

FOOTER = {"last": (b"\x00P", 12, 3), "prev": (b"\x01", 11, 3), "cluster": ["1", "2", "3"], "data_len": 5,
          "data_index": 10, "entries": [(b"\x00P1", 11), (b"\x00P2", 12)]}
ENTRIES = [(b"\x01" + bytes([i]) * (i * 7 % 50), i, 1 + i // 4) for i in range(1, 13)]


def snapshot_bytes() -> bytes:
    f = io.BytesIO()
    f.write(b"store")
    write_footer(f, FOOTER)
    return f.getvalue()


@pytest.fixture(scope="module")
def journal_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("journal-fuzz")


@pytest.fixture(scope="module")
def valid_journal(journal_dir) -> bytes:
    path = str(journal_dir / "valid.journal")
    journal = AppendJournal(path)
    for command, index, term in ENTRIES:
        journal.add(command, index, term)
    journal.close()
    with open(path, "rb") as f:
        return f.read()


@FUZZ
@given(st.one_of(mutated(snapshot_bytes()), st.binary(max_size=120)))
def test_snapshot_footers_decode_or_are_refused(data):
    """A mutated or random snapshot file gives its footer (of the exact expected shape) or SnapshotFooterError."""
    footer = bounded(lambda raw: read_footer(io.BytesIO(raw)), data, (SnapshotFooterError,))
    if not isinstance(footer, SnapshotFooterError):
        assert set(footer) >= {"last", "prev", "cluster", "data_len", "data_index", "entries"}
        assert footer["data_len"] + 5 <= len(data)


@FUZZ
@given(data=st.data(), synced_index=st.integers(0, len(ENTRIES)))
def test_journal_records_decode_or_are_refused(journal_dir, valid_journal, data, synced_index):
    """A mutated journal file reads as entries that were written (each record's CRC covers it), or raises
    JournalCorrupt (a damaged record at or below the fsynced index) or ValueError (not a journal)."""
    raw = data.draw(mutated(valid_journal))
    path = str(journal_dir / "mutated.journal")

    def decode(content):
        with open(path, "wb") as f:
            f.write(content)
        return read_entries(path, synced_index)

    result = bounded(decode, raw, (JournalCorrupt, ValueError))
    if not isinstance(result, ValueError):
        entries, offsets, end = result
        assert all(entry in ENTRIES for entry in entries)
        assert len(offsets) == len(entries) and end <= len(raw)
