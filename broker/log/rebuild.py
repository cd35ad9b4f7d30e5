"""Rebuilding a diverged replica (stream or queue partition) from its leader: the rules, independent of gRPC.

The leader pins its store on the loop thread (so the image and its applied index match), writes a compact image
to a temporary file and streams it. The replica's broker writes the image beside its store and installs it on
its own loop thread, only if its replica has not applied past the image's index: entries up to that index are
then skipped as already applied, and the log after it applies on top as usual. A replica that moved past the
copy asks for a fresh one (`REBUILD_ATTEMPTS_MAX` times in all), as does one whose leader moved while it asked
(NOT_LEADER: it copies from the new leader). A replica that leads hands leadership to an in-sync replica and
copies from it, before each try (the preferred-leader check may hand it back afterwards; that is harmless).
"""
from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from raftbus.client import errors

from raftbus.broker.context import BrokerContext, partition_group_id

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
REBUILD_ATTEMPTS_MAX = 3
HAND_OVER_WAIT_S = 5.0  # how long a leading replica waits for another to lead before it gives up (retriable)

# (topic, partition, leader address) -> the leader's image as (applied_index, chunk) pairs
CopySource = Callable[[str, int, str], Iterator[tuple[int, bytes]]]


class RebuildService:
    def __init__(self, context: BrokerContext, copy_from: CopySource):
        self.context = context
        self._copy_from = copy_from

    # ------------------------------------------------------------------ leader side
    def store_copy(self, topic: str, partition: int) -> Iterator[tuple[int, bytes]]:
        """The leader's store as a complete image, in chunks, each with the applied index it holds."""
        replica = self.context.leader_replica(topic, partition)
        pinned, index = self.context.run_on_loop(
            lambda: (replica.store.snapshot(), replica.state_machine.applied_index()))
        with tempfile.TemporaryFile() as image:
            try:
                pinned.write_to(image)
            finally:
                pinned.close()
            image.seek(0)
            while chunk := image.read(CHUNK_BYTES):
                yield index, chunk

    # ------------------------------------------------------------------ replica side
    def rebuild(self, topic: str, partition: int, work_dir: Path) -> tuple[int, int, int]:
        """Replace this broker's replica of (topic, partition) by a copy of the leader's store;
        (leader id, applied index of the copy, image bytes)."""
        found = self.context.topic(topic)
        if not 0 <= partition < len(found.partitions):
            raise errors.UnknownPartition(f"topic {topic!r} has no partition {partition}")
        group_id = partition_group_id(found.topic_id, partition)
        replica = self.context.partitions.get(group_id)
        if replica is None:
            raise errors.UnknownPartition(f"broker {self.context.node_id} holds no replica of {topic}/{partition}")
        for _ in range(REBUILD_ATTEMPTS_MAX):
            if replica.group.is_leader:
                self._step_aside(replica, group_id)
            leader_id = self.context.leader_of(group_id)
            address = self.context.broker_address(leader_id)
            if not address or leader_id == self.context.node_id:
                raise errors.LeaderNotAvailable(f"{topic}/{partition} has no other leader to copy from; retry")
            try:
                installed = self._copy_and_install(replica, topic, partition, address, work_dir)
            except errors.NotLeader:
                continue  # leadership moved while the copy was asked for: copy from the new leader
            if installed is not None:
                index, size = installed
                log.warning("partition replica rebuilt from the leader",
                            extra={"group": group_id, "leader": leader_id, "index": index})
                self.context.on_store_rebuilt(group_id)
                return leader_id, index, size
        raise errors.Unavailable(f"the leader moved or the replica kept applying past the leader's copy "
                                 f"({REBUILD_ATTEMPTS_MAX} tries); retry")

    def _step_aside(self, replica, group_id: str) -> None:
        """Hand this replica's leadership to an in-sync replica and wait until another leads."""
        others = [r for r in replica.group.in_sync_replicas(self.context.node_id) if r != self.context.node_id]
        if not others:
            raise errors.LeaderNotAvailable(f"{group_id}: no in-sync replica to take over leadership; retry")
        self.context.run_on_loop(lambda: replica.group.hand_over(others[0]))
        deadline = time.monotonic() + HAND_OVER_WAIT_S
        while replica.group.is_leader or self.context.leader_of(group_id) in (None, self.context.node_id):
            if time.monotonic() >= deadline:
                raise errors.LeaderNotAvailable(f"{group_id}: leadership did not move within {HAND_OVER_WAIT_S} s; "
                                                "retry")
            time.sleep(0.05)

    def _copy_and_install(self, replica, topic: str, partition: int, address: str,
                          work_dir: Path) -> tuple[int, int] | None:
        work_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="rebuild-", dir=work_dir)
        try:
            index, size = -1, 0
            with os.fdopen(fd, "wb") as image:
                for index, chunk in self._copy_from(topic, partition, address):
                    image.write(chunk)
                    size += len(chunk)
            if size == 0:
                raise errors.InternalError("the leader sent an empty store image")

            def install():
                if replica.state_machine.applied_index() > index:
                    return False
                with open(name, "rb") as image_file:
                    replica.store.restore(image_file)
                replica.state_machine.reload()
                return True
            return (index, size) if self.context.run_on_loop(install) else None
        finally:
            Path(name).unlink(missing_ok=True)
