"""Goal: backup verification accepts a whole chain and names each kind of damage: a changed file, batches that do
not cover the offsets the manifest names, an incremental backup that does not start where the one before stopped,
and an unreadable queue line."""
import base64
import json
from pathlib import Path

import pytest

from raftbus.client.backup.layout import FULL, INCREMENTAL, MANIFEST, Manifest, add_to_index, sha256_of
from raftbus.client.backup.verify import verify_backup
from raftbus.client.errors import InvalidArgument
from raftbus.client.records import encode_batch, encode_stored_batch


def batches(first_offset: int, counts: list[int]) -> bytes:
    out, offset = b"", first_offset
    for count in counts:
        blob, n, max_ts = encode_batch([(1, None, b"v", ())] * count)
        out += encode_stored_batch(offset, n, 5, max_ts, blob)
        offset += n
    return out


def write_backup(root: Path, name: str, kind: str, segment_from: int, data: bytes, to: int,
                 queue_lines: list[str] = ()) -> None:
    folder = root / name
    (folder / "streams/t").mkdir(parents=True)
    (folder / "queues/q").mkdir(parents=True)
    (folder / "streams/t/0.batches").write_bytes(data)
    (folder / "queues/q/0.jsonl").write_text("".join(line + "\n" for line in queue_lines))
    manifest = Manifest(kind=kind, created_ms=1, streams={"t": {"0": {
        "from": segment_from, "to": to, "file": "streams/t/0.batches",
        "sha256": sha256_of(folder / "streams/t/0.batches"), "bytes": len(data)}}},
        queues={"q": {"0": {"file": "queues/q/0.jsonl", "sha256": sha256_of(folder / "queues/q/0.jsonl"),
                            "messages": len(queue_lines)}}})
    (folder / MANIFEST).write_text(manifest.to_json())
    add_to_index(root, name)


def queue_line(record: bytes) -> str:
    return json.dumps({"record": base64.b64encode(record).decode()})


def test_a_whole_chain_verifies(tmp_path):
    write_backup(tmp_path, "0001-full", FULL, 10, batches(10, [3, 2]), 15, [queue_line(encode_batch([(1, None,
                                                                                                     b"m", ())])[0])])
    write_backup(tmp_path, "0002-incremental", INCREMENTAL, 15, batches(15, [4]), 19)
    assert verify_backup(tmp_path) == []


def test_each_damage_is_named(tmp_path):
    write_backup(tmp_path, "0001-full", FULL, 0, batches(0, [3]), 4, [queue_line(b"\x00garbage")])
    write_backup(tmp_path, "0002-incremental", INCREMENTAL, 5, batches(5, [1]), 6)
    problems = verify_backup(tmp_path)
    assert any("batches end at 3, the manifest says 4" in p for p in problems)
    assert any("starts at 5, the backup before stopped at 4" in p for p in problems)
    assert any("unreadable message line" in p for p in problems)
    (tmp_path / "0002-incremental/streams/t/0.batches").write_bytes(b"changed")
    assert any("does not match its SHA-256" in p for p in verify_backup(tmp_path))


def test_a_folder_without_backups_is_an_invalid_argument(tmp_path):
    with pytest.raises(InvalidArgument, match="holds no raftbus backup"):
        verify_backup(tmp_path)
