"""Kafka's incremental fetch sessions (KIP-227): a fetcher names its partitions once, then sends only what
changed, and the broker answers only the partitions with something new.

A full fetch with session epoch 0 opens a session (up to `sessions_max` on this broker; past that the oldest
idle one is evicted, as Kafka does); epoch -1 fetches without one. An incremental fetch must name an open
session and its next epoch (else FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH, and the client
starts a full fetch again). Pure: the listener's loop is its only user.
"""
from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass, field

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FINAL_EPOCH = -1
INITIAL_EPOCH = 0


@dataclass
class FetchSession:
    session_id: int
    epoch: int = 1  # the epoch the next incremental request must carry
    # (topic, partition) -> [fetch_offset, partition_max_bytes]
    partitions: OrderedDict = field(default_factory=OrderedDict)
    # (topic, partition) -> (high_watermark, log_start_offset) last answered
    answered: dict = field(default_factory=dict)


class FetchSessions:
    def __init__(self, sessions_max: int, first_id: int = 1):
        self.sessions_max = sessions_max
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self._ids = itertools.count(first_id)

    def __len__(self) -> int:
        return len(self._sessions)

    def resolve(self, session_id: int, epoch: int, requested, forgotten):
        """(session or None, [(topic, partition, fetch_offset, max_bytes)], error code) for one request.
        `requested` lists (topic, partition, fetch_offset, max_bytes); `forgotten` lists (topic, partition)."""
        if session_id == 0:
            if epoch == INITIAL_EPOCH:
                return self._open(requested), list(requested), 0
            return None, list(requested), 0
        session = self._sessions.get(session_id)
        if epoch in (FINAL_EPOCH, INITIAL_EPOCH):
            self._sessions.pop(session_id, None)
            return (self._open(requested) if epoch == INITIAL_EPOCH else None), list(requested), 0
        if session is None:
            return None, [], FETCH_SESSION_ID_NOT_FOUND
        if epoch != session.epoch:
            return None, [], INVALID_FETCH_SESSION_EPOCH
        self._sessions.move_to_end(session_id)
        for key in forgotten:
            session.partitions.pop(key, None)
            session.answered.pop(key, None)
        for topic, partition, offset, max_bytes in requested:
            session.partitions[(topic, partition)] = [offset, max_bytes]
        session.epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        return session, [(t, p, o, m) for (t, p), (o, m) in session.partitions.items()], 0

    def _open(self, requested) -> FetchSession:
        while len(self._sessions) >= self.sessions_max:
            self._sessions.popitem(last=False)
        session = FetchSession(next(self._ids))
        for topic, partition, offset, max_bytes in requested:
            session.partitions[(topic, partition)] = [offset, max_bytes]
        self._sessions[session.session_id] = session
        return session

    @staticmethod
    def worth_answering(session: FetchSession | None, incremental: bool, key, answer: dict) -> bool:
        """Whether a partition's answer goes into the response (an incremental answer leaves out partitions with
        no records, no error and the same offsets as last time)."""
        state = (answer.get("high_watermark"), answer.get("log_start_offset"))
        if session is None:
            return True
        changed = session.answered.get(key) != state
        session.answered[key] = state
        return not incremental or changed or bool(answer.get("records")) or answer.get("error_code", 0) != 0
