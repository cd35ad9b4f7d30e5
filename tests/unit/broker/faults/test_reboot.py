"""Goal: only a restart on a new boot after an unclean stop (a power loss or an OS crash) discards the stores —
never a restart after kill -9 on the same boot, nor one after a clean stop — and discarding removes every store
but no journal or snapshot."""
from raftbus.broker.raft.reboot import BootRecord, discard_stores


def layout(root):
    for path in ("metadata/store", "metadata/raft", "partitions/p1.0/store", "partitions/p1.0/raft"):
        (root / path).mkdir(parents=True)
        (root / path / "data").write_bytes(b"x")


def test_a_crash_on_the_same_boot_keeps_the_stores(tmp_path):
    BootRecord(tmp_path, "boot-a").starting()
    assert not BootRecord(tmp_path, "boot-a").unclean_reboot()


def test_a_clean_stop_before_a_reboot_keeps_the_stores(tmp_path):
    record = BootRecord(tmp_path, "boot-a")
    record.starting()
    record.stopped_cleanly()
    assert not BootRecord(tmp_path, "boot-b").unclean_reboot()


def test_a_new_boot_after_an_unclean_stop_is_a_power_loss(tmp_path):
    BootRecord(tmp_path, "boot-a").starting()
    assert BootRecord(tmp_path, "boot-b").unclean_reboot()
    assert not BootRecord(tmp_path / "fresh", "boot-b").unclean_reboot()  # nothing recorded yet


def test_discarding_removes_the_stores_and_keeps_journals(tmp_path):
    layout(tmp_path)
    removed = discard_stores(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in removed) == ["metadata/store", "partitions/p1.0/store"]
    assert (tmp_path / "metadata/raft/data").exists() and (tmp_path / "partitions/p1.0/raft/data").exists()
    assert not (tmp_path / "partitions/p1.0/store").exists()
