"""Flow-control arithmetic of what a leader sends its peers (pure; used by `raftbus.broker.raft.transfer`).

- `EntryWindow`: log entries one group sent one peer and has not had acknowledged.
- `PeerShares`: the part of each peer's send buffer (`raft_bulk_send_buffer_bytes_max`) that log entries and
  snapshot chunks may fill, split evenly between the groups sending to that peer; one per hub, so per broker.
- `allowance`: how many bytes one more message may carry, given the group's window and the peer's room.
"""
from __future__ import annotations

import weakref
from collections import deque


class PeerShares:
    """The part of each peer's send buffer that entries and snapshot chunks may use, split evenly between the
    groups sending them (one per hub, so per broker)."""

    def __init__(self, hub, budget_bytes: int):
        self.hub = hub
        self.budget_bytes = budget_bytes
        self._active: dict[int, set[str]] = {}

    def set_active(self, peer_id: int, group_id: str, active: bool) -> None:
        groups = self._active.setdefault(peer_id, set())
        if active:
            groups.add(group_id)
        else:
            groups.discard(group_id)

    def share(self, peer_id: int) -> int:
        return self.budget_bytes // max(1, len(self._active.get(peer_id, ())))

    def room(self, peer_id: int) -> int:
        """Bytes of entries or chunks that may still be queued to the peer now."""
        return self.budget_bytes - self.hub.buffered_bytes(peer_id)


_SHARES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def shares_of(hub, budget_bytes: int) -> PeerShares:
    shares = _SHARES.get(hub)
    if shares is None:
        shares = _SHARES[hub] = PeerShares(hub, budget_bytes)
    return shares


def allowance(in_flight: int, limit: int, room: int) -> int:
    """Bytes one more message may carry: within the group's limit and the peer's room; 0 means wait. With nothing in
    flight the group may always send one message (of at least one entry or chunk) while the peer has room."""
    if room <= 0:
        return 0
    if in_flight == 0:
        return max(1, min(limit, room))
    return max(0, min(limit - in_flight, room))


class EntryWindow:
    """Log entries sent to one peer and not acknowledged yet: (first index, last index, bytes) per message."""

    def __init__(self):
        self._sent: deque = deque()
        self.bytes = 0

    def add(self, first: int, last: int, size: int) -> None:
        self._sent.append((first, last, size))
        self.bytes += size

    def trim(self, match_index: int, next_index: int) -> None:
        """Forget messages the peer acknowledged, and those Raft will send again (nextIndex moved back)."""
        sent = self._sent
        while sent and sent[0][1] <= match_index:
            self.bytes -= sent.popleft()[2]
        while sent and sent[-1][0] >= next_index:
            self.bytes -= sent.pop()[2]

    def clear(self) -> None:
        self._sent.clear()
        self.bytes = 0


def entries_within(journal, first_index: int, budget: int, at_least_one: bool) -> tuple[list, int]:
    """Entries from `first_index` on whose commands add up to at most `budget` bytes (with `at_least_one`, one
    entry even if it is larger), and that sum. The sizes come first (`AppendJournal.command_bytes` knows a released
    entry's from the file's offsets), then the entries in one slice: a journal reads released ones back with one
    pread of just those."""
    start = first_index - journal[0][1]
    command_bytes = getattr(journal, "command_bytes", None) or (lambda position: len(journal[position][0]))
    end, size, total = start, 0, len(journal)
    while end < total:
        length = command_bytes(end)
        if size + length > budget and (end > start or not at_least_one):
            break
        size += length
        end += 1
    return (journal[start:end] if end > start else []), size
