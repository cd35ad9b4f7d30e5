"""Vote requests that arrive before their group exists here: kept briefly and handed to the group when it opens.

When thousands of partitions are created at once, each broker opens its new replicas one after another, and the
brokers do not keep the same pace: the preferred replica of a group often stands (broker/raft/first_election.py)
before a peer has opened its own replica. Dropped, such a request would cost the candidate a whole election
timeout and a second term (one more durable term write on every replica).

So the loop keeps the latest vote request per (group, peer) for groups it does not host, at most `groups_max`
groups (the oldest go first) and for at most `keep_ms` each, and hands what is still fresh to the group when it
is added: to Raft this is a message delayed in the network, which it tolerates like any other delay. Only vote
requests are kept (their four fields, so the memory is bounded by the count); other messages for unknown
groups are still dropped and resent by their sender (an append at the leader's next heartbeat).
"""
from __future__ import annotations

from collections import OrderedDict

from raftbus.broker.raft.clock import Clock, monotonic_s


class EarlyVotes:
    """Loop thread only."""

    def __init__(self, keep_ms: int, groups_max: int, clock: Clock = monotonic_s):
        self.keep_s = keep_ms / 1000
        self.groups_max = groups_max
        self._clock = clock
        self._kept: OrderedDict[str, dict[int, tuple[float, dict]]] = OrderedDict()  # group → peer → (at, message)
        self.kept_total = 0
        self.delivered_total = 0

    def keep(self, group_id: str, peer_id: int, message) -> bool:
        """Keep `message` if it is a vote request; False when it is not (the caller drops it)."""
        if self.groups_max <= 0 or self.keep_s <= 0 or not _is_vote_request(message):
            return False
        now = self._clock()
        by_peer = self._kept.get(group_id)
        if by_peer is None:
            self._forget_stale(now)
            while len(self._kept) >= self.groups_max:
                self._kept.popitem(last=False)
            by_peer = self._kept[group_id] = {}
        held = by_peer.get(peer_id)
        if held is None or held[1]["term"] <= message["term"]:
            by_peer[peer_id] = (now, {field: message[field] for field in _VOTE_FIELDS})
        self.kept_total += 1
        return True

    def take(self, group_id: str) -> list[tuple[int, dict]]:
        """The fresh vote requests kept for a group being added (and forget them all)."""
        by_peer = self._kept.pop(group_id, None)
        if not by_peer:
            return []
        now = self._clock()
        fresh = [(peer_id, message) for peer_id, (at, message) in by_peer.items() if now - at <= self.keep_s]
        self.delivered_total += len(fresh)
        return fresh

    def __len__(self) -> int:
        return len(self._kept)

    def _forget_stale(self, now: float) -> None:
        """Drop groups whose newest request is older than keep_s (oldest first, so stop at the first fresh one)."""
        while self._kept:
            group_id, by_peer = next(iter(self._kept.items()))
            if now - max(at for at, _ in by_peer.values()) <= self.keep_s:
                return
            del self._kept[group_id]


_VOTE_FIELDS = ("type", "term", "last_log_index", "last_log_term")  # a vote request's fields; only these are kept


def _is_vote_request(message) -> bool:
    return isinstance(message, dict) and message.get("type") == "request_vote" and \
        all(type(message.get(field)) is int for field in _VOTE_FIELDS[1:])
