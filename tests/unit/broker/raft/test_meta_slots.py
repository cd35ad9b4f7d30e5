"""Goal: a group's term and vote survive any torn or lost write that was not made durable yet, in the slotted meta
file and when it replaces a file of the single-record format; meta records are read without pickle."""
import os
import pickle

import pytest

from raftbus.broker.raft.meta_slots import (SLOT_BYTES, MetaCodecError, SlotFile, decode_meta, encode_meta,
                                            read_slots)


def test_the_newest_write_is_read_back(tmp_path):
    path = str(tmp_path / "m")
    slots = SlotFile(path)
    for term in range(1, 6):
        slots.write({"currentTerm": term, "votedForNodeId": "2"})
        slots.sync_data()
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
    slots.sync_data()
    durable = slots.durable_slot
    slots.write({"currentTerm": 3, "votedForNodeId": "1", "raftCommitIndex": 9})  # a hint, not synced
    slots.write({"currentTerm": 4, "votedForNodeId": "3"})  # torn by a power loss before the pass's sync
    tear(path, 1 - durable)
    assert read_slots(path)[0] == {"currentTerm": 3, "votedForNodeId": "1"}


def test_writes_never_overwrite_the_durable_slot_until_they_are_durable(tmp_path):
    path = str(tmp_path / "m")
    slots = SlotFile(path)
    slots.write({"currentTerm": 1})
    slots.sync_data()
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


def test_a_file_of_the_single_record_format_is_read_and_kept_until_the_first_write_is_durable(tmp_path):
    path = str(tmp_path / "m")
    with open(path, "wb") as f:  # as pysyncobj wrote it: a protocol-2 pickle of the dict
        f.write(pickle.dumps({"currentTerm": 7, "votedForNodeId": "2", "raftCommitIndex": 40}, protocol=2))
    slots = SlotFile(path)
    assert slots.meta == {"currentTerm": 7, "votedForNodeId": "2", "raftCommitIndex": 40}
    slots.write({"currentTerm": 8, "votedForNodeId": "3"})
    assert read_slots(path)[0]["currentTerm"] == 8
    tear(path, 1)  # the first slot write lost: the old file's vote is still there
    assert read_slots(path)[0] == {"currentTerm": 7, "votedForNodeId": "2", "raftCommitIndex": 40}


def test_no_file_is_no_metadata(tmp_path):
    assert read_slots(str(tmp_path / "absent"))[0] == {}


@pytest.mark.parametrize("value", [0, 1, 255, 256, 65535, 65536, 2**31 - 1, 2**31, -1, -2**31, -2**31 - 1, 2**63,
                                   2**64 + 5, -2**70, None, "", "2", "\u00e9\u00e9"])
def test_meta_records_are_the_pickles_every_broker_version_reads(value):
    """Goal: what raftbus writes, pickle (older brokers) reads as the same dict, and what pickle wrote (older
    brokers, pysyncobj) raftbus reads back: the on-disk format is unchanged."""
    meta = {"currentTerm": value, "votedForNodeId": "3", "raftCommitIndex": 7}
    assert pickle.loads(encode_meta(meta)) == meta
    assert decode_meta(encode_meta(meta)) == meta
    assert decode_meta(pickle.dumps(meta, protocol=2)) == meta
    assert decode_meta(pickle.dumps({}, protocol=2)) == {}


class _RunsCommand:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_meta_file_holding_anything_but_plain_values_is_no_metadata_and_runs_no_code(tmp_path):
    """Goal: a pickle naming a function (or holding a list, a float, a torn end) is refused, never run."""
    marker = tmp_path / "code-ran"
    for bad in (pickle.dumps({"currentTerm": _RunsCommand(marker)}, protocol=2), pickle.dumps([1], protocol=2),
                pickle.dumps({"currentTerm": 1.5}, protocol=2), encode_meta({"currentTerm": 3})[:-3], b""):
        with pytest.raises(MetaCodecError):
            decode_meta(bad)
        path = str(tmp_path / "m")
        with open(path, "wb") as f:
            f.write(bad)
        assert read_slots(path)[0] == {}
    assert not marker.exists()
    with pytest.raises(MetaCodecError):
        encode_meta({"currentTerm": 1.5})
