"""What a broker knows of its own faults — groups that crash-stopped, a full disk — and what it says about them.

A stopped group answers NOT_SERVING under its group id in the gRPC health service (the metadata group's stop
makes the whole broker NOT_SERVING, service ""), and both appear in BrokerStats (`stopped_groups`,
`disk_full`). A replica whose store does not add up to its kept checksum when opened (bit rot, a store changed
behind the state machine) is listed in BrokerStats (`damaged_stores`) and answers NOT_SERVING; it keeps
replicating, but hands away any leadership it wins until `raftbus partitions rebuild` replaces its store, and
its peers stop moving leadership to it as the preferred replica (the broker gossips its damaged stores). While the disk is full the broker hands every group it leads to a replica with room; a group
that stopped because its disk was full is reopened (from its journal) once there is room again. Any other
stop lasts until the broker restarts.
"""
from __future__ import annotations

import logging
import threading

from grpc_health.v1 import health_pb2

from raftbus.broker.raft.disk import DiskSpace

log = logging.getLogger(__name__)
_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class FaultWatch:
    def __init__(self, disk: DiskSpace, groups: dict, *, broker_group: str):
        self.disk = disk
        self._groups = groups  # the loop's groups by id (read on the loop thread)
        self._broker_group = broker_group
        self._lock = threading.Lock()
        self.stopped: dict[str, tuple[str, bool]] = {}  # group id -> (reason, stopped for lack of space)
        self.peers_disk_full: set[int] = set()
        self.peers_damaged: dict[int, set[str]] = {}  # what each peer last said of its damaged stores
        self.peers_stopping: set[int] = set()  # peers that said they are stopping (they hand leaderships away)
        self.damaged: set[str] = set()  # groups whose store failed its checksum when opened, until rebuilt
        self._health = None

    # ------------------------------------------------------------------ health
    def attach_health(self, health) -> None:
        self._health = health
        with self._lock:
            stopped = list(self.stopped)
        for group_id in stopped:
            self._publish(group_id, serving=False)

    def _publish(self, group_id: str, *, serving: bool) -> None:
        if self._health is None:
            return
        status = _SERVING if serving else _NOT_SERVING
        self._health.set(group_id, status)
        if group_id == self._broker_group:
            self._health.set("", status)

    # ------------------------------------------------------------------ groups
    def on_group_stopped(self, group) -> None:
        with self._lock:
            self.stopped[group.group_id] = (group.stopped, group.stopped_disk_full)
        self._publish(group.group_id, serving=False)

    def on_open_failed(self, group_id: str, reason: str, *, disk_full: bool = False) -> None:
        """The group could not be opened (a damaged journal or store, no space): it counts as stopped."""
        log.critical("raft group %s cannot be opened: %s", group_id, reason, extra={"group": group_id})
        with self._lock:
            self.stopped[group_id] = (reason, disk_full)
        self._publish(group_id, serving=False)

    def forget_unplaced(self, placed: set[str]) -> None:
        """Stopped partition groups no longer placed on this broker (their topic was deleted or moved) are gone:
        no longer reported, and unknown to the health service."""
        with self._lock:
            gone = [g for g in self.stopped if g != self._broker_group and g not in placed]
            for group_id in gone:
                del self.stopped[group_id]
            self.damaged = {g for g in self.damaged if g == self._broker_group or g in placed}
        if self._health is not None:
            for group_id in gone:
                self._health.set(group_id, health_pb2.HealthCheckResponse.SERVICE_UNKNOWN)

    def on_store_damaged(self, group_id: str) -> None:
        """A store failed its checksum (any thread): report it, and lead elsewhere until it is rebuilt."""
        with self._lock:
            self.damaged.add(group_id)
        if group_id != self._broker_group:  # a damaged metadata store is reported, not a broker out of service
            self._publish(group_id, serving=False)

    def on_store_rebuilt(self, group_id: str) -> None:
        with self._lock:
            damaged = group_id in self.damaged
            self.damaged.discard(group_id)
        if damaged and not self.is_stopped(group_id):
            self._publish(group_id, serving=True)

    def is_stopped(self, group_id: str) -> bool:
        with self._lock:
            return group_id in self.stopped

    def on_group_reopened(self, group_id: str) -> None:
        with self._lock:
            self.stopped.pop(group_id, None)
        self._publish(group_id, serving=True)

    def reopenable(self) -> list[str]:
        """Groups that stopped for lack of space, now that there is room again."""
        if self.disk.full:
            return []
        with self._lock:
            return [g for g, (_, disk_full) in self.stopped.items() if disk_full]

    # ------------------------------------------------------------------ loop thread
    def lead_elsewhere(self) -> None:
        """Hand away every leadership a damaged replica holds (its reads and the snapshots it sends could carry
        the damage); the metadata group is left alone (its store is repaired by hand, docs/storage.md)."""
        with self._lock:
            damaged = [g for g in self.damaged if g != self._broker_group]
        for group_id in damaged:
            group = self._groups.get(group_id)
            if group is not None and group.is_leader and group.transport.nodes:
                group.hand_over(None)

    def check_disk(self) -> None:
        """Measure the free space; while full, hand every group led here to a replica with room."""
        self.disk.check()
        if not self.disk.full:
            return
        for group in list(self._groups.values()):
            if group.is_leader and group.transport.nodes:
                group.hand_over(None)

    def stats(self) -> dict:
        with self._lock:
            stopped, damaged = sorted(self.stopped), sorted(self.damaged)
        return {"stopped_groups": stopped, "disk_full": self.disk.full, "damaged_stores": damaged}
