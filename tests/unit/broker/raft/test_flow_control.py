"""Goal: what a leader may send a peer is bounded by the group's window and by an even share of the peer's bulk
budget; a group with nothing in flight can always make progress; acknowledged or re-sent entries leave the window."""
from __future__ import annotations

import pytest

from raftbus.broker.raft.flow_control import EntryWindow, PeerShares, allowance, shares_of
from raftbus.broker.settings import load_settings
from raftbus.client import errors


class Hub:
    def __init__(self):
        self.buffered = {}

    def buffered_bytes(self, peer_id):
        return self.buffered.get(peer_id, 0)


def test_allowance_respects_the_window_and_the_peer_room():
    assert allowance(in_flight=0, limit=100, room=1000) == 100
    assert allowance(in_flight=60, limit=100, room=1000) == 40
    assert allowance(in_flight=100, limit=100, room=1000) == 0
    assert allowance(in_flight=10, limit=100, room=30) == 30
    assert allowance(in_flight=10, limit=100, room=0) == 0
    assert allowance(in_flight=0, limit=100, room=-5) == 0  # the buffer is over budget: even a fresh group waits


def test_the_budget_is_shared_evenly_by_the_groups_sending_to_a_peer():
    shares = PeerShares(Hub(), budget_bytes=900)
    assert shares.share(2) == 900
    for group in ("a", "b", "c"):
        shares.set_active(2, group, True)
    assert shares.share(2) == 300 and shares.share(3) == 900
    shares.set_active(2, "b", False)
    shares.set_active(2, "b", False)
    assert shares.share(2) == 450


def test_room_is_what_the_hub_has_not_buffered_yet():
    hub = Hub()
    shares = shares_of(hub, 1000)
    assert shares_of(hub, 1000) is shares  # one per hub, so per broker
    hub.buffered[2] = 700
    assert shares.room(2) == 300 and shares.room(3) == 1000


def test_the_window_forgets_acknowledged_and_rewound_messages():
    window = EntryWindow()
    window.add(10, 19, 100)
    window.add(20, 29, 100)
    window.add(30, 39, 100)
    window.trim(match_index=15, next_index=40)
    assert window.bytes == 300  # a message counts until all of it is acknowledged
    window.trim(match_index=19, next_index=40)
    assert window.bytes == 200
    window.trim(match_index=19, next_index=25)  # a rejection moved nextIndex back: 30..39 will be sent again
    assert window.bytes == 100
    window.clear()
    assert window.bytes == 0


@pytest.mark.parametrize("overrides, word", [
    ({"raft_snapshot_chunk_bytes": 0}, "raft_snapshot_chunk_bytes"),
    ({"raft_snapshot_chunks_in_flight_max": 0}, "raft_snapshot_chunks_in_flight_max"),
    ({"raft_bulk_send_buffer_bytes_max": 250 * 1024 * 1024}, "raft_bulk_send_buffer_bytes_max"),
    ({"raft_snapshot_chunk_bytes": 40 * 1024 * 1024}, "raft_frame_bytes_max"),
])
def test_flow_control_settings_that_could_overflow_the_buffer_are_refused(overrides, word):
    with pytest.raises(errors.InvalidArgument, match=word):
        load_settings(**overrides)


def test_flow_control_settings_reach_the_raft_groups():
    raft = load_settings(raft_snapshot_chunk_bytes=2 << 20, raft_catch_up_bytes_in_flight_max=3 << 20).raft.group
    assert (raft.snapshot_chunk_bytes, raft.catch_up_bytes_in_flight_max) == (2 << 20, 3 << 20)
    assert raft.snapshot_chunks_in_flight_max == 8 and raft.bulk_send_buffer_bytes_max == 64 << 20


def test_entries_within_fill_a_message_up_to_the_budget_but_always_one_when_asked():
    from raftbus.broker.raft.flow_control import entries_within

    journal = [(b"x" * 10, index, 1) for index in range(5, 205)]  # 200 entries of 10 bytes, from index 5
    entries, size = entries_within(journal, 7, budget=35, at_least_one=False)
    assert [e[1] for e in entries] == [7, 8, 9] and size == 30
    entries, size = entries_within(journal, 7, budget=5, at_least_one=False)
    assert entries == [] and size == 0
    entries, size = entries_within(journal, 7, budget=5, at_least_one=True)
    assert [e[1] for e in entries] == [7] and size == 10
    entries, size = entries_within(journal, 100, budget=10_000, at_least_one=False)
    assert [e[1] for e in entries] == list(range(100, 205)) and size == 1050  # past several slices, to the end


def test_entries_within_reads_back_only_the_released_entries_it_sends(tmp_path, monkeypatch):
    from raftbus.broker.raft import journal as journal_module
    from raftbus.broker.raft.flow_control import entries_within
    from raftbus.broker.raft.journal import AppendJournal

    journal = AppendJournal(str(tmp_path / "raft.journal"))
    for index in range(1, 101):
        journal.add(bytes([index]) * 1000, index, 1)
    journal.release_through(100)
    real_pread, read = journal_module.os.pread, []
    monkeypatch.setattr(journal_module.os, "pread", lambda fd, n, at: read.append(n) or real_pread(fd, n, at))
    entries, size = entries_within(journal, 11, budget=5_500, at_least_one=True)
    assert [e[1] for e in entries] == [11, 12, 13, 14, 15] and size == 5_000
    assert all(e[0] == bytes([e[1]]) * 1000 for e in entries)
    assert len(read) == 1 and read[0] < 6_000  # one pread of the five records, not of a whole slice
