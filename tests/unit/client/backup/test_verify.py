"""Goal: backup verification accepts a whole chain and names each kind of damage: a changed file, batches that do
not cover the offsets the manifest names, an incremental backup that does not start where the one before stopped,
and an unreadable queue line."""
import pytest

from raftbus.client.backup.layout import FULL, INCREMENTAL
from raftbus.client.backup.verify import verify_backup
from raftbus.client.errors import InvalidArgument

from tests.unit.client.backup.builder import batches, full_chain, message_record, queue_line, write_backup


def test_a_whole_chain_verifies(tmp_path):
    """Goal: a full backup and an incremental one that follows it verify with no problem."""
    full_chain(tmp_path)
    assert verify_backup(tmp_path) == []


def test_each_damage_is_named(tmp_path):
    """Goal: each kind of damage is reported with what it is."""
    write_backup(tmp_path, FULL, 0, batches(0, [3]), 4, [queue_line(b"\x00garbage")])
    write_backup(tmp_path, INCREMENTAL, 5, batches(5, [1]), 6, [queue_line(message_record(), state="gone")])
    problems = verify_backup(tmp_path)
    assert any("batches end at 3, the manifest says 4" in p for p in problems)
    assert any("starts at 5, the backup before stopped at 4" in p for p in problems)
    assert any("the record does not decode" in p for p in problems)
    assert any("state 'gone' is not one of" in p for p in problems)
    (tmp_path / "0002-incremental/streams/t/0.batches").write_bytes(b"changed")
    assert any("does not match its SHA-256" in p for p in verify_backup(tmp_path))
    (tmp_path / "0002-incremental/streams/t/0.batches").unlink()
    assert any("streams/t/0.batches is missing" in p for p in verify_backup(tmp_path))


def test_a_folder_without_backups_is_an_invalid_argument(tmp_path):
    """Goal: verifying a folder that holds no backup is INVALID_ARGUMENT."""
    with pytest.raises(InvalidArgument, match="holds no raftbus backup"):
        verify_backup(tmp_path)
