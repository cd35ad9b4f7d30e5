"""Goal: a snapshot sent in chunks arrives byte for byte however the chunks are cut, lost or repeated; a transfer
resumes from what the follower holds; a copy whose digest or fields are wrong is refused, never installed."""
from __future__ import annotations

import hashlib
import os

import pytest

from raftbus.broker.raft.snapshot_stream import Chunk, SnapshotChunkError, SnapshotReceiver, SnapshotSender

CHUNK_BYTES = 1000


@pytest.fixture
def snapshot(tmp_path):
    path = tmp_path / "raft.snapshot"
    path.write_bytes(os.urandom(10_500))
    return path


def send_all(sender: SnapshotSender, receiver: SnapshotReceiver) -> bool:
    complete = False
    while sender.next_chunk_bytes():
        complete = receiver.accept(sender.next_chunk())
        sender.on_ack(sender.size if complete else receiver.written)
    return complete


def test_chunks_rebuild_the_file_and_only_the_last_one_carries_the_digest(snapshot, tmp_path):
    sender = SnapshotSender(snapshot, origin=1, chunk_bytes=CHUNK_BYTES)
    receiver = SnapshotReceiver(tmp_path / "incoming")
    chunks = []
    while sender.next_chunk_bytes():
        chunks.append(sender.next_chunk())
    assert [len(c.data) for c in chunks] == [CHUNK_BYTES] * 10 + [500]
    assert all(c.digest is None for c in chunks[:-1])
    assert chunks[-1].digest == hashlib.sha256(snapshot.read_bytes()).digest()
    assert [receiver.accept(c) for c in chunks] == [False] * 10 + [True]
    assert (tmp_path / "incoming").read_bytes() == snapshot.read_bytes()
    sender.close()


def test_a_dropped_connection_resumes_from_the_last_acknowledged_offset(snapshot, tmp_path):
    sender = SnapshotSender(snapshot, origin=1, chunk_bytes=CHUNK_BYTES)
    receiver = SnapshotReceiver(tmp_path / "incoming")
    for _ in range(3):
        receiver.accept(sender.next_chunk())
    sender.on_ack(receiver.written)
    sender.next_chunk()  # lost with the connection
    sender.next_chunk()
    sender.resume()
    assert (sender.sent, sender.acked) == (3000, 3000)
    assert send_all(sender, receiver)
    assert (tmp_path / "incoming").read_bytes() == snapshot.read_bytes() and sender.done


def test_a_receiver_ahead_of_a_fresh_sender_keeps_its_bytes(snapshot, tmp_path):
    """A new sender of the same file starts at 0; the receiver answers with what it holds and the sender jumps
    there (its digest still covers the whole file)."""
    first = SnapshotSender(snapshot, origin=1, chunk_bytes=CHUNK_BYTES)
    receiver = SnapshotReceiver(tmp_path / "incoming")
    for _ in range(4):
        receiver.accept(first.next_chunk())
    first.close()
    again = SnapshotSender(snapshot, origin=1, chunk_bytes=CHUNK_BYTES)
    assert again.id == first.id
    assert receiver.accept(again.next_chunk()) is False  # bytes it already holds: nothing written
    again.on_ack(receiver.written)
    assert again.sent == 4000
    assert send_all(again, receiver)
    assert (tmp_path / "incoming").read_bytes() == snapshot.read_bytes()


def test_a_gap_makes_the_sender_go_back_once(snapshot, tmp_path):
    """A chunk arriving after a gap is answered with what the follower holds; the sender goes back there once,
    not again for every chunk that was in flight behind it."""
    sender = SnapshotSender(snapshot, origin=1, chunk_bytes=CHUNK_BYTES)
    receiver = SnapshotReceiver(tmp_path / "incoming")
    receiver.accept(sender.next_chunk())
    sender.on_ack(receiver.written)
    sender.next_chunk()  # dropped on the way
    behind = [sender.next_chunk(), sender.next_chunk()]
    assert receiver.accept(behind[0]) is False and receiver.written == 1000
    assert sender.on_ack(receiver.written) is False and sender.sent == 4000  # an ordinary ack: 3000 in flight
    assert sender.on_ack(receiver.written, resend=True) is True and sender.sent == 1000
    sender.next_chunk()
    assert receiver.accept(behind[1]) is False
    assert sender.on_ack(receiver.written, resend=True) is False and sender.sent == 2000  # the same gap
    sender.resume()  # the chunk sent after the rewind was lost as well: the caller's ack timeout resumes
    assert send_all(sender, receiver)
    assert (tmp_path / "incoming").read_bytes() == snapshot.read_bytes()


def test_a_follower_that_restarted_makes_the_sender_start_over(snapshot, tmp_path):
    sender = SnapshotSender(snapshot, origin=1, chunk_bytes=CHUNK_BYTES)
    receiver = SnapshotReceiver(tmp_path / "incoming")
    for _ in range(3):
        receiver.accept(sender.next_chunk())
    sender.on_ack(receiver.written)
    restarted = SnapshotReceiver(tmp_path / "other")  # holds nothing of this snapshot
    assert restarted.accept(sender.next_chunk()) is False and restarted.written == 0
    assert sender.on_ack(restarted.written, resend=True) is True and (sender.sent, sender.acked) == (0, 0)
    assert send_all(sender, restarted)
    assert (tmp_path / "other").read_bytes() == snapshot.read_bytes()


def test_a_digest_that_does_not_match_discards_the_copy(snapshot, tmp_path):
    sender = SnapshotSender(snapshot, origin=1, chunk_bytes=CHUNK_BYTES)
    receiver = SnapshotReceiver(tmp_path / "incoming")
    chunks = []
    while sender.next_chunk_bytes():
        chunks.append(sender.next_chunk())
    forged = Chunk(chunks[3].snapshot_id, chunks[3].offset, chunks[3].size, b"x" * CHUNK_BYTES, None)
    for chunk in chunks[:3] + [forged] + chunks[4:-1]:
        assert receiver.accept(chunk) is False
    with pytest.raises(SnapshotChunkError, match="digest"):
        receiver.accept(chunks[-1])
    assert receiver.written == 0 and not (tmp_path / "incoming").exists()


@pytest.mark.parametrize("change, word", [
    ({"id": 7}, "id"),
    ({"id": "x" * 200}, "id"),
    ({"offset": -1}, "offset"),
    ({"offset": 20_000}, "offset"),
    ({"data": b""}, "data"),
    ({"data": "text"}, "data"),
    ({"data": b"y" * 20_000}, "data"),
    ({"digest": b"d" * 32}, "digest"),
    ({"offset": 9_000, "data": b"z" * 1_000, "digest": None}, "digest"),
])
def test_malformed_chunks_are_refused(change, word):
    fields = {"id": "1:2:10000:3", "offset": 0, "size": 10_000, "data": b"a" * 1000, "digest": None, **change}
    with pytest.raises(SnapshotChunkError, match=word):
        Chunk.from_fields(fields)


def test_a_chunk_round_trips_through_its_fields():
    chunk = Chunk("1:2:3:4", 0, 3, b"abc", b"d" * 32)
    assert Chunk.from_fields({"type": "snapshot_chunk", "term": 5, **chunk.fields()}) == chunk
