"""How many partition replicas keep their files open at once, so a broker can host more than its file descriptors.

An open replica holds 6 file descriptors: its LMDB store 3 (the data file twice, the lock file) and its Raft
journal 3 (the journal, its fsync mark, its term and vote file). A broker hosting 10,000 replicas would need 60,000, more than many machines let a process have. So the
broker keeps at most `storage_replicas_open_max` stores and as many journals open (0: as many as the process's
RLIMIT_NOFILE soft limit allows after `storage_fds_reserved` for sockets and the rest, divided by 6). Opening one
more parks the least recently used members that nothing is using at that moment, down to 9/10 of the bound:

- a parked store has fsynced and closed its LMDB environment: LMDB wrote every committed page to the file at
  commit, so nothing is lost, and the group commit has nothing to fsync for it.
- a parked journal has fsynced and closed its files; likewise.

The group commit therefore fsyncs only through descriptors held open and opens no file: a broker whose descriptors
run out (EMFILE) keeps committing.

The next read or write of a parked member opens it again (`raftbus_storage_reopened_total`). Parking changes no
byte on disk and no answer; only an idle replica's first use after it costs an open. A member is parked only
when its own lock is free right now (never waited for), so parking never blocks a reader, a writer or the thread
that opened another member, and a busy member is simply skipped.

Descriptors no client can take (`plan_descriptors`): at start the broker raises its RLIMIT_NOFILE soft limit to
the hard limit, and refuses to start unless its client connection bounds (`grpc_connections_max`, and
`kafka_connections_max` with the Kafka port on) plus `storage_raft_fds_reserved` fit in what the open replicas
leave (`storage_fds_reserved`, or the limit less 6 per replica of `storage_replicas_open_max`). The ports close
a connection beyond their bounds at once, so clients never hold more than their share: the replicas' files, the
Raft connections, snapshot and compaction files always have descriptors.

Lock order: a member's own locks, then the budget's lock; the budget never takes a member's lock while holding its
own, and takes other members' locks only without waiting.
"""
from __future__ import annotations

import itertools
import resource
import threading
from typing import Protocol

from raftbus.client import errors

FDS_PER_REPLICA = 6  # LMDB: data file twice and lock file; the Raft journal, its fsync mark, its term and vote
PARK_DOWN_TO = 0.9   # a sweep parks down to this fraction of the bound, so sweeps are rare

_uses = itertools.count(1)


def next_use() -> int:
    """A recency stamp: larger is more recent (shared by every budget of the process)."""
    return next(_uses)


class Parkable(Protocol):
    last_used: int

    def park(self) -> bool:
        """Close the member's files unless something is using it now (never waits); True once parked."""


def raise_descriptor_limit() -> int:
    """Raise the RLIMIT_NOFILE soft limit to the hard limit; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass  # e.g. an infinite hard limit the kernel caps lower: keep the soft limit
    return (1 << 20) if soft == resource.RLIM_INFINITY else soft


def plan_descriptors(storage, client_connections_max: int) -> int:
    """The bound on open replicas, after raising the descriptor limit and checking that `client_connections_max`
    (every client port's connection bound together) and `storage_raft_fds_reserved` fit beside the replicas (see
    the module docstring); InvalidArgument naming the settings otherwise."""
    soft = raise_descriptor_limit()
    replicas_open_max = derived_limit(storage.storage_replicas_open_max, storage.storage_fds_reserved)
    if storage.storage_replicas_open_max == 0:
        room, room_name = storage.storage_fds_reserved, f"storage_fds_reserved={storage.storage_fds_reserved}"
    else:
        room = soft - FDS_PER_REPLICA * replicas_open_max
        room_name = (f"the {soft} descriptors of ulimit -n less {FDS_PER_REPLICA} for each of "
                     f"storage_replicas_open_max={replicas_open_max}")
    needed = client_connections_max + storage.storage_raft_fds_reserved
    if needed > room:
        raise errors.InvalidArgument(
            f"client connections ({client_connections_max}: grpc_connections_max, and kafka_connections_max with the "
            f"Kafka port on) and storage_raft_fds_reserved={storage.storage_raft_fds_reserved} need {needed} file "
            f"descriptors, more than {room_name}: lower the connection bounds, raise storage_fds_reserved or "
            "`ulimit -n`, or lower storage_replicas_open_max")
    return replicas_open_max


def derived_limit(replicas_open_max: int, fds_reserved: int) -> int:
    """`replicas_open_max` when set, else what the RLIMIT_NOFILE soft limit leaves after `fds_reserved`."""
    if replicas_open_max > 0:
        return replicas_open_max
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    limit = (soft - fds_reserved) // FDS_PER_REPLICA
    if limit < 1:
        raise errors.InvalidArgument(f"the file descriptor limit ({soft}) leaves no room for replicas after "
                                     f"storage_fds_reserved={fds_reserved}; raise `ulimit -n` or set "
                                     "storage_replicas_open_max")
    return limit


class OpenBudget:
    """At most `limit` members open; see the module docstring. Thread-safe."""

    def __init__(self, limit: int, kind: str):
        if limit < 1:
            raise errors.InvalidArgument(f"open {kind} bound must be >= 1, got {limit}")
        self.limit = limit
        self.kind = kind
        self._lock = threading.Lock()
        self._open: set = set()
        self.parked_total = 0
        self.reopened_total = 0

    @property
    def open_count(self) -> int:
        with self._lock:
            return len(self._open)

    def opened(self, member: Parkable, *, reopened: bool = False) -> None:
        """`member` has opened its files (its own lock may be held); past the bound, park others that are idle."""
        with self._lock:
            self._open.add(member)
            if reopened:
                self.reopened_total += 1
            excess = len(self._open) - self.limit
            if excess <= 0:
                return
            excess = len(self._open) - max(1, int(self.limit * PARK_DOWN_TO))
            candidates = sorted((m for m in self._open if m is not member), key=_last_used)
        parked = 0
        for candidate in candidates:
            if parked >= excess:
                break
            if candidate.park():  # tells parked() itself, under its own lock
                parked += 1

    def parked(self, member: Parkable) -> None:
        """`member` closed its files (called under its own lock)."""
        with self._lock:
            if member in self._open:
                self._open.discard(member)
                self.parked_total += 1

    def closed(self, member: Parkable) -> None:
        """`member` is closed for good."""
        with self._lock:
            self._open.discard(member)


def _last_used(member: Parkable) -> int:
    return member.last_used
