"""Goal: the group history checker fails on a lost record, a record at the wrong offset, two owners in one
generation and a record processed without owning its partition, and passes a clean history."""
import json

import pytest

from tests.group_history import GroupHistory


def journal(tmp_path, name, entries, tail=""):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries) + tail)
    return path


def owned(member, generation, *partitions):
    return {"m": member, "g": generation, "owned": [["t", p] for p in partitions]}


def record(member, generation, partition, offset, value):
    return {"m": member, "g": generation, "p": partition, "o": offset, "v": value}


ACKED = {b"a": (0, 0), b"b": (1, 0)}


def clean(tmp_path):
    return [journal(tmp_path, "m1", [owned("m1", 5, 0), record("m1", 5, 0, 0, "a")]),
            journal(tmp_path, "m2", [owned("m2", 5, 1), record("m2", 5, 1, 0, "b"), record("m2", 5, 1, 0, "b")],
                    tail='{"m": "m2", "g')]


def test_clean_history_passes_and_counts_reprocessing(tmp_path):
    figures = GroupHistory.read(clean(tmp_path)).check(ACKED)
    assert figures == {"processed": 3, "distinct": 2, "reprocessed": 1, "generations": 1, "members": 2}


@pytest.mark.parametrize("extra, message", [
    ([owned("m3", 5, 1)], "owned by m2 and m3"),
    ([owned("m3", 6, 2), record("m3", 6, 1, 0, "b")], "without owning"),
    ([owned("m3", 6, 1), record("m3", 6, 1, 7, "b")], "another offset"),
])
def test_violations_are_caught(tmp_path, extra, message):
    paths = clean(tmp_path) + [journal(tmp_path, "m3", extra)]
    with pytest.raises(AssertionError, match=message):
        GroupHistory.read(paths).check(ACKED)


def test_lost_record_is_caught(tmp_path):
    with pytest.raises(AssertionError, match="never processed"):
        GroupHistory.read(clean(tmp_path)).check({**ACKED, b"c": (0, 1)})


def test_garbled_line_inside_a_journal_is_an_error(tmp_path):
    path = journal(tmp_path, "m1", [owned("m1", 5, 0)], tail='garbage\n{"m": "m1", "g": 5, "owned": []}\n')
    with pytest.raises(AssertionError, match="garbled"):
        GroupHistory.read([path])
