"""Replica comparison for `raftbus topics verify`: the rules, independent of gRPC.

Stream partitions: the partition leader proposes a checkpoint command; every replica records its checksums when
it applies it (broker/log/digest.py), so all of them describe the same log index. Each broker hosting a replica
then answers with its record and re-reads its stored batches against the kept digest.
Queue partitions: every applied command keeps the store's content digest (broker/content_digest.py), so the
leader names its applied index and each replica answers its digest at that index (from the digests of its last
applied commands) and re-reads its store against the kept digest.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from raftbus.client import errors

from raftbus.broker import commands
from raftbus.broker.content_digest import DIGEST_HISTORY_MAX
from raftbus.broker.context import BrokerContext, partition_group_id, wait_result
from raftbus.broker.log.digest import Checkpoint


log = logging.getLogger(__name__)


_CHECKS: queue.SimpleQueue = queue.SimpleQueue()
_checker_lock = threading.Lock()
_checker: threading.Thread | None = None


def check_on_open(group_id: str, state_machine, store, bytes_max: int,
                  on_damaged: Callable[[str], None] | None = None) -> threading.Event | None:
    """Queue a re-read of a store just opened (stream, queue or metadata) against its kept checksum (stores larger
    than `bytes_max` are left to the verify commands); one checker thread per process takes them one at a time, logs
    a mismatch as an error and tells `on_damaged`. Returns an event set once this store was checked."""
    if bytes_max == 0 or (bytes_max > 0 and store.size_bytes() > bytes_max):
        return None
    global _checker
    done = threading.Event()
    _CHECKS.put((group_id, state_machine, done, on_damaged))
    with _checker_lock:
        if _checker is None or not _checker.is_alive():
            _checker = threading.Thread(target=_check_stores, name="raftbus-store-check", daemon=True)
            _checker.start()
    return done


def _check_stores() -> None:
    while True:
        group_id, state_machine, done, on_damaged = _CHECKS.get()
        try:
            if state_machine.store_consistent() is False:
                log.error("store does not match its checksum: a stored value changed on disk; rebuild "
                          "this replica (raftbus partitions rebuild)", extra={"group": group_id})
                if on_damaged is not None:
                    on_damaged(group_id)
        except Exception:  # a store closed meanwhile (replica dropped) or unreadable
            log.exception("partition store check failed", extra={"group": group_id})
        finally:
            done.set()


class ReplicaReport(NamedTuple):
    broker_id: int
    applied_index: int
    checkpoint: Checkpoint | None
    store_consistent: bool | None  # None: a store without checksums


class VerifyService:
    def __init__(self, context: BrokerContext, fetch_wait_max_ms: int):
        self.context = context
        self.fetch_wait_max_ms = fetch_wait_max_ms

    def checkpoint(self, topic: str, partition: int) -> tuple[int, list[tuple[int, str]]]:
        """The index at which the replicas of a partition this broker leads are compared, and the replicas
        (broker id, client address). A stream partition proposes a checkpoint command; a queue partition keeps
        its content digest at every applied command, so the leader's applied index serves (no command)."""
        replica = self.context.leader_replica(topic, partition)
        if self.context.topic(topic).kind == "queue":
            index = replica.state_machine.applied_index()
        else:
            index = wait_result(replica.group.submit(commands.CHECKPOINT_COMMAND),
                                self.context.commit_timeout_s).index
        placement = self.context.topic(topic).partitions[partition]
        return index, [(b, self.context.broker_address(b) or "") for b in placement.replicas]

    def replica_report(self, topic: str, partition: int, index: int, max_wait_ms: int) -> ReplicaReport:
        """This broker's replica's record of checkpoint `index` (waiting up to max_wait_ms for it to apply it)."""
        found = self.context.topic(topic)
        if not 0 <= partition < len(found.partitions):
            raise errors.UnknownPartition(f"topic {topic!r} has no partition {partition}")
        replica = self.context.partitions.get(partition_group_id(found.topic_id, partition))
        if replica is None:
            raise errors.UnknownPartition(f"broker {self.context.node_id} holds no replica of {topic}/{partition}")
        sm = replica.state_machine
        wait_s = min(max(max_wait_ms, 0), self.fetch_wait_max_ms) / 1000
        deadline = time.monotonic() + wait_s
        with replica.appended:
            replica.appended.wait_for(lambda: sm.applied_index() >= index or time.monotonic() >= deadline, wait_s)
        checkpoint = _queue_checkpoint(sm, index) if found.kind == "queue" else sm.checkpoint()
        return ReplicaReport(self.context.node_id, sm.applied_index(), checkpoint, sm.store_consistent())


def _queue_checkpoint(sm, index: int) -> Checkpoint | None:
    """A queue replica's content digest once `index` was applied (None while it has not applied it)."""
    if sm.applied_index() < index:
        return None
    digest = sm.digest_at(index)
    if digest is None:
        raise errors.Unavailable(f"index {index} is older than the {DIGEST_HISTORY_MAX} last applied commands whose "
                                 f"digest this replica keeps; verify again")
    return Checkpoint(index, 0, 0, digest)
