"""Goal: a group's term and vote survive any torn or lost write that was not made durable yet, in the slotted meta
file and when it replaces a file in pysyncobj's format."""
import pysyncobj.journal as raft_journal

from raftbus.broker.raft.meta_slots import SLOT_BYTES, SlotFile, read_slots


def test_the_newest_write_is_read_back(tmp_path):
    path = str(tmp_path / "m")
    slots = SlotFile(path)
    for term in range(1, 6):
        slots.write({"currentTerm": term, "votedForNodeId": "2"})
        slots.fsync()
    assert read_slots(path)[0] == {"currentTerm": 5, "votedForNodeId": "2"}
    assert SlotFile(path).meta["currentTerm"] == 5


def tear(path: str, slot: int) -> None:
    with open(path, "r+b") as f:
        f.seek(slot * SLOT_BYTES + 10)
        f.write(b"\xff\xfe")


def test_a_torn_write_leaves_the_last_durable_vote(tmp_path):
    path = str(tmp_path / "m")
    slots = SlotFile(path)
    slots.write({"currentTerm": 3, "votedForNodeId": "1"})
    slots.fsync()
    durable = slots.durable_slot
    slots.write({"currentTerm": 3, "votedForNodeId": "1", "raftCommitIndex": 9})  # a hint, not synced
    slots.write({"currentTerm": 4, "votedForNodeId": "3"})  # torn by a power loss before the pass's sync
    tear(path, 1 - durable)
    assert read_slots(path)[0] == {"currentTerm": 3, "votedForNodeId": "1"}


def test_writes_never_overwrite_the_durable_slot_until_they_are_durable(tmp_path):
    path = str(tmp_path / "m")
    slots = SlotFile(path)
    slots.write({"currentTerm": 1})
    slots.fsync()
    durable = slots.durable_slot
    for commit in range(5):
        slots.write({"currentTerm": 1, "raftCommitIndex": commit})
        assert slots.durable_slot == durable
    tear(path, 1 - durable)
    assert read_slots(path)[0] == {"currentTerm": 1}
    slots.write({"currentTerm": 2})
    slots.synced()
    assert slots.durable_slot == 1 - durable
    assert read_slots(path)[0] == {"currentTerm": 2}


def test_a_file_in_pysyncobjs_format_is_read_and_kept_until_the_first_write_is_durable(tmp_path):
    path = str(tmp_path / "m")
    with open(path, "wb") as f:
        f.write(raft_journal.dumps({"currentTerm": 7, "votedForNodeId": "2", "raftCommitIndex": 40}))
    slots = SlotFile(path)
    assert slots.meta == {"currentTerm": 7, "votedForNodeId": "2", "raftCommitIndex": 40}
    slots.write({"currentTerm": 8, "votedForNodeId": "3"})
    assert read_slots(path)[0]["currentTerm"] == 8
    tear(path, 1)  # the first slot write lost: the old file's vote is still there
    assert read_slots(path)[0] == {"currentTerm": 7, "votedForNodeId": "2", "raftCommitIndex": 40}


def test_no_file_is_no_metadata(tmp_path):
    assert read_slots(str(tmp_path / "absent"))[0] == {}
