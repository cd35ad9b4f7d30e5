"""In-process replication for unit and component tests: commands apply at once, in order, on the caller's thread.

It keeps the `Replica` contract (submit → future of the state machine's result) without Raft, so services can
be tested over it with a manual clock. Leadership can be taken away to exercise NOT_LEADER paths.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future

from raftbus.client import errors


class InProcessGroup:
    def __init__(self, group_id: str, state_machine, store=None, *, self_id: int = 1):
        self.group_id = group_id
        self.state_machine = state_machine
        self.store = store
        self._self_id = self_id
        self._leader_id: int | None = self_id
        self._index = state_machine.applied_index() if hasattr(state_machine, "applied_index") else 0
        self._lock = threading.Lock()
        self.listeners: list = []
        self.preferred_leader = self_id

    def submit(self, command: bytes) -> Future:
        future: Future = Future()
        with self._lock:
            if self._leader_id != self._self_id:
                future.set_exception(errors.NotLeader("not the leader", leader_id=self._leader_id))
                return future
            self._index += 1
            result = self.state_machine.apply(self._index, command)
        future.set_result(result)
        for listener in self.listeners:
            listener(self)
        return future

    def confirm_read(self) -> Future:
        """Applied state is always current here: confirmed at once while leading, NotLeader otherwise."""
        future: Future = Future()
        if self.is_leader:
            future.set_result(self._index)
        else:
            future.set_exception(errors.NotLeader("not the leader", leader_id=self._leader_id))
        return future

    @property
    def is_leader(self) -> bool:
        return self._leader_id == self._self_id

    @property
    def caught_up_as_leader(self) -> bool:
        return self.is_leader  # it applies every command as it commits

    @property
    def leader_id(self) -> int | None:
        return self._leader_id

    @property
    def term(self) -> int:
        return 1

    def set_leader(self, leader_id: int | None) -> None:
        self._leader_id = leader_id

    def in_sync_replicas(self, self_id: int) -> list[int]:
        return [self_id] if self.is_leader else []

    def sync(self) -> None:
        if self.store is not None:
            self.store.sync()

    def close(self) -> None:
        pass
