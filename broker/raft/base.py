"""The replication seam: what services need from a replicated group.

`RaftGroup` (the Raft core over the broker's one loop and one transport) is the production implementation;
`InProcessGroup` applies commands at once and serves fast unit and component tests.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import Protocol


class StateMachine(Protocol):
    def apply(self, index: int, command: bytes) -> object:
        """Apply one committed command; never raises; returns a result or an error instance."""


class Replica(Protocol):
    group_id: str
    state_machine: StateMachine

    def submit(self, command: bytes) -> Future:
        """Propose `command`; the future resolves with the state machine's result once it is committed on a
        majority and applied here, or fails with a typed, retriable error (NotLeader, RequestTimedOut...)."""

    def confirm_read(self) -> Future:
        """A future that completes once this replica's applied state answers linearizably a read that began before
        the call (ReadIndex on the Raft core), or fails with a typed, retriable error (NotLeader...)."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def caught_up_as_leader(self) -> bool:
        """Leads and has applied everything committed before its term (answers from its state are complete)."""

    @property
    def leader_id(self) -> int | None: ...
