"""Produce, fetch and list offsets on stream topics: the rules, independent of gRPC."""
from __future__ import annotations

from concurrent.futures import Future

from raftbus.client import errors
from raftbus.client.records import check_framing

from raftbus.broker import commands
from raftbus.broker.log.settings import LogSettings
from raftbus.broker.context import BrokerContext, wait_result
from raftbus.broker.groups.offset_service import check_member

EARLIEST = -2
LATEST = -1


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
                       record_count: int, max_timestamp_ms: int, records: bytes, now_ms: int | None = None) -> Future:
        """Validate and propose one batch without waiting: bad input (an empty or oversized batch, records that do
        not parse or whose count differs from `record_count`) raises at once; the future resolves to the
        state machine's result (a ProduceResult or a typed error value) once committed and applied here.
        Batches submitted one after another are proposed, and so appended, in that order. `now_ms` is the time
        stamped into the command when the caller already stamped it into the batch (LogAppendTime)."""
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
        now_ms = self.context.clock.now_ms() if now_ms is None else now_ms
        command = commands.encode_produce(now_ms, producer_id, base_sequence, record_count, max_timestamp_ms,
                                          records)
        return replica.group.submit(command)

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
