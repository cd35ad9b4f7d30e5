"""Produce, fetch and list offsets on stream topics: the rules, independent of gRPC."""
from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass

from raftbus.client import errors
from raftbus.client.records import check_framing

from raftbus.broker import commands
from raftbus.broker.log.settings import LogSettings
from raftbus.broker.context import BrokerContext, wait_beyond_any, wait_result
from raftbus.broker.groups.offset_service import check_member
from raftbus.broker.log import compaction_commands, key_index

EARLIEST = -2
LATEST = -1


@dataclass(frozen=True)
class PartitionRead:
    """One partition's part of a FetchMany answer: its batches, or the typed error that refused it (with the
    partition's offsets where they are known, as for an offset out of range)."""

    partition: int
    high_watermark: int = -1
    log_start_offset: int = -1
    batches: bytes = b""
    error: errors.RaftbusError | None = None


class LogService:
    def __init__(self, context: BrokerContext, settings: LogSettings):
        self.context = context
        self.settings = settings

    def produce(self, topic: str, partition: int, *, producer_id: bytes, base_sequence: int, record_count: int,
                max_timestamp_ms: int, records: bytes):
        """Append one batch; answers once it is committed on a majority and applied on this leader."""
        future = self.submit_produce(topic, partition, producer_id=producer_id, base_sequence=base_sequence,
                                     record_count=record_count, max_timestamp_ms=max_timestamp_ms, records=records)
        return wait_result(future, self.settings.produce_timeout_ms / 1000)

    def submit_produce(self, topic: str, partition: int, *, producer_id: bytes, base_sequence: int,
                       record_count: int, max_timestamp_ms: int, records: bytes, now_ms: int | None = None,
                       expected_revision: int | None = None) -> Future:
        """Validate and propose one batch without waiting: bad input (an empty or oversized batch, records that do
        not parse or whose count differs from `record_count`; on a compacted topic a record without a key or with
        a key over `compacted_key_bytes_max`) raises at once; the future resolves to the state machine's result (a
        ProduceResult or a typed error value) once committed and applied here. Batches submitted one after another
        are proposed, and so appended, in that order. `now_ms` is the time stamped into the command when the caller
        already stamped it into the batch (LogAppendTime). `expected_revision` makes it a compare-and-set of a
        one-record batch on a compacted topic, decided where it is applied."""
        if not records or record_count < 1:
            raise errors.EmptyBatch("a produce request needs at least one record")
        if len(records) > self.settings.batch_bytes_max:
            raise errors.BatchTooLarge(
                f"batch of {len(records)} bytes exceeds batch_bytes_max={self.settings.batch_bytes_max}")
        if len(producer_id) not in (0, 16):
            raise errors.InvalidArgument("producer_id must be empty or 16 bytes")
        if base_sequence < 0:
            raise errors.InvalidArgument("base_sequence must be >= 0")
        replica = self.context.leader_replica(topic, partition, kind="stream")
        # CorruptBatch: nothing unreadable is ever replicated (raftbus's records or one Kafka batch)
        check_framing(records, record_count, self.settings.batch_decompressed_bytes_max)
        compacted = self.context.topic(topic).compaction.compacted
        if expected_revision is not None and not compacted:
            raise errors.NotCompacted(f"compare-and-set needs a compacted topic; {topic!r} has cleanup policy "
                                      f"{self.context.topic(topic).compaction.cleanup_policy}")
        if expected_revision is not None and record_count != 1:
            raise errors.InvalidArgument(f"a compare-and-set writes one record, not {record_count}")
        if compacted:
            key_index.check_keys(records, record_count, self.settings.compacted_key_bytes_max)
        self.sync_policy(replica, compacted)  # the partition applies the topic's policy before this batch
        now_ms = self.context.clock.now_ms() if now_ms is None else now_ms
        command = commands.encode_produce(now_ms, producer_id, base_sequence, record_count, max_timestamp_ms,
                                          records)
        if expected_revision is not None:
            command = compaction_commands.encode_conditional(expected_revision, command)
        return replica.group.submit(command)

    def sync_policy(self, replica, compacted: bool) -> Future | None:
        """Propose the partition's compaction policy when its state machine has not applied the topic's yet (before
        the batch the caller proposes next, so that batch is indexed); None when they agree."""
        if replica.state_machine.compaction_state().compacted == compacted:
            return None
        return replica.group.submit(compaction_commands.encode_policy(compacted))

    # ------------------------------------------------------------------ compacted topics: key-value reads
    def get_key(self, topic: str, partition: int, key: bytes):
        """(found, revision, record or None, high watermark): the key's latest record from the key index, read
        once the leader confirmed its leadership for the read (ReadIndex: linearizable)."""
        replica = self._compacted_replica(topic, partition)
        entry, high_watermark = replica.state_machine.lookup(key)
        log_start, _ = replica.state_machine.offsets()
        if entry is None or entry.offset < log_start:
            return False, -1, None, high_watermark
        if entry.tombstone:
            return False, entry.offset, None, high_watermark
        return True, entry.offset, replica.state_machine.record_at(entry.offset), high_watermark

    def list_keys(self, topic: str, partition: int, prefix: bytes, start_after: bytes | None, limit: int):
        """(up to `limit` (key, revision) pairs in key order, whether more follow, high watermark)."""
        most = self.settings.table_keys_per_call_max
        limit = most if limit <= 0 else min(limit, most)
        replica = self._compacted_replica(topic, partition)
        _, high_watermark = replica.state_machine.offsets()
        found = replica.state_machine.key_entries(prefix, start_after, limit + 1)
        return [(k, e.offset) for k, e in found[:limit]], len(found) > limit, high_watermark

    def _compacted_replica(self, topic: str, partition: int):
        if not self.context.topic(topic).compaction.compacted:
            raise errors.NotCompacted(f"topic {topic!r} is not compacted: key-value reads need cleanup policy "
                                      f"compact")
        replica = self._confirmed_leader_replica(topic, partition)
        sm = replica.state_machine
        if not sm.compaction_state().index_ready(sm.offsets()[0]):
            # a partition that has not applied the policy yet (a table just created) indexes from its end once it
            # does: propose it and wait; one holding records from before must build its index back first
            pending = self.sync_policy(replica, True)
            if pending is not None:
                wait_result(pending, self.settings.produce_timeout_ms / 1000)
            if not sm.compaction_state().index_ready(sm.offsets()[0]):
                raise errors.IndexBuilding(f"the key index of {topic}/{partition} is being built")
        return replica

    def start_at(self, topic: str, partition: int, offset: int) -> int:
        """An empty partition's next offset becomes `offset` (restoring a backup at the same offsets)."""
        if offset < 0:
            raise errors.InvalidArgument(f"offset {offset} must be >= 0")
        replica = self.context.leader_replica(topic, partition, kind="stream")
        return wait_result(replica.group.submit(commands.encode_start_at(offset)),
                           self.settings.produce_timeout_ms / 1000)

    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int, max_wait_ms: int,
              member: tuple[str, str, int] | None = None):
        """Committed batches from the one holding `offset` on; long-polls up to max_wait_ms at the end of the log.

        `member` (group, member_id, generation) makes it a consumer-group fetch, refused unless the member owns
        the partition at that generation.
        """
        replica = self._confirmed_leader_replica(topic, partition)
        if member is not None:
            check_member(self.context, *member, topic, partition)
        max_bytes = min(max(max_bytes, 1), self.settings.fetch_bytes_max)
        max_wait_ms = min(max(max_wait_ms, 0), self.settings.fetch_wait_max_ms)
        _, high_watermark = replica.state_machine.offsets()
        if offset == high_watermark and max_wait_ms > 0:
            replica.wait_beyond(offset, max_wait_ms / 1000, self.settings.fetch_waiters_max)
            replica = self.context.leader_replica(topic, partition, kind="stream")
        return replica.state_machine.read(offset, max_bytes)

    def fetch_many(self, topic: str, wanted: list[tuple[int, int, int]], *, max_bytes: int, max_wait_ms: int,
                   member: tuple[str, str, int] | None = None) -> list[PartitionRead]:
        """Fetch of many partitions of `topic`, each (partition, offset, its max bytes or 0), in request order.

        Each partition is read as `fetch` reads it, once its leadership is confirmed for this read (every
        partition's confirmation started at once); one this broker cannot serve is answered with its error while
        the others are read. The answer holds at most `max_bytes` (at least one batch of the first partition with
        records): partitions past it are answered without batches. When no partition has records (and none was
        refused) the call long-polls up to `max_wait_ms` for an append to any of them. Offsets -2 and -1 name the
        log start and the high watermark.
        """
        if not wanted:
            raise errors.InvalidArgument("FetchMany names no partition")
        if len(wanted) > self.settings.fetch_many_partitions_max:
            raise errors.InvalidArgument(f"FetchMany names {len(wanted)} partitions; at most "
                                         f"fetch_many_partitions_max={self.settings.fetch_many_partitions_max}")
        if len({partition for partition, _, _ in wanted}) != len(wanted):
            raise errors.InvalidArgument("FetchMany names a partition more than once")
        if any(offset < EARLIEST for _, offset, _ in wanted):
            raise errors.InvalidArgument("offsets must be >= 0, -2 (the log start) or -1 (the high watermark)")
        max_bytes = min(max(max_bytes, 1), self.settings.fetch_bytes_max)
        max_wait_ms = min(max(max_wait_ms, 0), self.settings.fetch_wait_max_ms)
        replicas = self._confirmed_replicas(topic, [partition for partition, _, _ in wanted], member)
        positions = [(partition, self._resolved(replica, offset), part_max)
                     for (partition, offset, part_max), replica in zip(wanted, replicas)]
        answers = self._read_many(replicas, positions, max_bytes)
        if max_wait_ms > 0 and not any(a.batches or a.error for a in answers):
            wait_beyond_any([(replica, offset) for replica, (_, offset, _) in zip(replicas, positions)],
                            max_wait_ms / 1000, self.settings.fetch_waiters_max)
            replicas = [self._still_leader(topic, partition) for partition, _, _ in positions]
            answers = self._read_many(replicas, positions, max_bytes)
        return answers

    def _confirmed_replicas(self, topic: str, partitions: list[int], member) -> list:
        """Each partition's replica here once its leadership is confirmed for this read, or the typed error that
        stopped it; the confirmations run together and are waited for up to produce_timeout_ms in all."""
        started = []
        for partition in partitions:
            try:
                replica, confirmed = self.confirm_leader(topic, partition)
                if member is not None:
                    check_member(self.context, *member, topic, partition)
                started.append((replica, confirmed))
            except errors.RaftbusError as exc:
                started.append(exc)
        deadline_s = time.monotonic() + self.settings.produce_timeout_ms / 1000
        replicas: list = []
        for item in started:
            if isinstance(item, errors.RaftbusError):
                replicas.append(item)
                continue
            replica, confirmed = item
            try:
                wait_result(confirmed, max(0.0, deadline_s - time.monotonic()))
                replicas.append(replica)
            except errors.RaftbusError as exc:
                replicas.append(exc)
        return replicas

    @staticmethod
    def _resolved(replica, offset: int) -> int:
        if isinstance(replica, errors.RaftbusError) or offset >= 0:
            return offset
        log_start, high_watermark = replica.state_machine.offsets()
        return log_start if offset == EARLIEST else high_watermark

    def _still_leader(self, topic: str, partition: int):
        try:
            return self.context.leader_replica(topic, partition, kind="stream")
        except errors.RaftbusError as exc:
            return exc

    @staticmethod
    def _read_many(replicas: list, positions: list[tuple[int, int, int]], max_bytes: int) -> list[PartitionRead]:
        answers, total = [], 0
        for replica, (partition, offset, part_max) in zip(replicas, positions):
            if isinstance(replica, errors.RaftbusError):
                answers.append(PartitionRead(partition, error=replica))
                continue
            sm = replica.state_machine
            if total >= max_bytes:
                log_start, high_watermark = sm.offsets()
                answers.append(PartitionRead(partition, high_watermark, log_start))
                continue
            try:
                found = sm.read(offset, min(max(part_max, 0) or max_bytes, max_bytes - total))
            except errors.OffsetOutOfRange as exc:
                log_start, high_watermark = sm.offsets()
                answers.append(PartitionRead(partition, high_watermark, log_start, error=exc))
                continue
            total += len(found.batches)
            answers.append(PartitionRead(partition, found.high_watermark, found.log_start_offset, found.batches))
        return answers

    def list_offsets(self, topic: str, partition: int, timestamp_ms: int) -> tuple[int, int, int]:
        """(offset, log_start_offset, high_watermark) for earliest (-2), latest (-1) or a time."""
        replica = self._confirmed_leader_replica(topic, partition)
        log_start, high_watermark = replica.state_machine.offsets()
        if timestamp_ms == EARLIEST:
            return log_start, log_start, high_watermark
        if timestamp_ms == LATEST:
            return high_watermark, log_start, high_watermark
        if timestamp_ms < 0:
            raise errors.InvalidArgument("timestamp_ms must be -2 (earliest), -1 (latest) or a time in ms")
        return replica.state_machine.offset_for_time(timestamp_ms), log_start, high_watermark

    def _confirmed_leader_replica(self, topic: str, partition: int):
        """The partition's replica here once its Raft leader confirmed, after this call, that it still leads and
        applied everything committed before (ReadIndex, `RaftGroup.confirm_read`), so a read from it sees every
        write acknowledged before; a deposed leader raises."""
        replica, confirmed = self.confirm_leader(topic, partition)
        wait_result(confirmed, self.settings.produce_timeout_ms / 1000)
        return replica

    def confirm_leader(self, topic: str, partition: int) -> tuple[object, Future]:
        """The partition's replica here and a future that completes once its leadership is confirmed for a read
        that began now (what _confirmed_leader_replica waits for, for callers that await instead of blocking)."""
        replica = self.context.leader_replica(topic, partition, kind="stream")
        return replica, replica.group.confirm_read()

    def trim_if_due(self, replica, retention_ms: int, retention_bytes: int) -> None:
        """Submit a retention command when the oldest batch or the size is past the topic's limits (leader only)."""
        sm = replica.state_machine
        now_ms = self.context.clock.now_ms()
        oldest = sm.oldest_append_time_ms()
        if oldest is None:
            return
        by_time = retention_ms >= 0 and oldest <= now_ms - retention_ms
        by_size = retention_bytes >= 0 and sm.size_bytes() > retention_bytes
        if by_time or by_size:
            replica.group.submit(commands.encode_trim(now_ms, retention_ms, retention_bytes,
                                                      self.settings.producer_idle_ms))
