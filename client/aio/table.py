"""AsyncTable: the key-value table of client/table.py for asyncio code, on grpc.aio.

    async with AsyncTable("127.0.0.1:7070", "settings") as table:
        revision = await table.put("color", "blue")
        entry = await table.get("color")
        async for event in table.watch():
            ...

The same calls, answers and errors as Table: reads by key from the partition leader's index after a ReadIndex confirmation,
writes as one-record batches of an idempotent producer per partition (an asyncio lock keeps one in flight), the
watch's snapshot and changes read by an AsyncReader sharing the table's router.
"""
from __future__ import annotations

import asyncio
import heapq
import os
import time
from collections.abc import AsyncIterator

from raftbus.client import settings
from raftbus.client.credentials import TlsSource
from raftbus.client.errors import InvalidArgument, RaftbusError, RevisionMismatch, UnknownProducerId
from raftbus.client.murmur2 import partition_for_key
from raftbus.client.reader import EARLIEST, Cursor
from raftbus.client.records import encode_stream_batch
from raftbus.client.table import NO_REVISION, Entry, Key, Value, WatchEvent, as_bytes
from raftbus.client.wire import raftbus_pb2 as pb

from raftbus.client.aio.lifecycle import AsyncClient
from raftbus.client.aio.reader import AsyncReader
from raftbus.client.aio.router import AsyncRouter


class _Lane:
    def __init__(self):
        self.lock = asyncio.Lock()
        self.producer_id = os.urandom(16)
        self.sequence = 0

    def start_over(self) -> None:
        self.producer_id, self.sequence = os.urandom(16), 0


class AsyncTable(AsyncClient):
    """A key-value table over the compacted topic `topic`; an async context manager that closes its channels."""

    NO_REVISION = NO_REVISION

    def __init__(self, bootstrap: str | list[str] | None = None, topic: str = "", *,
                 request_timeout_ms: int = settings.REQUEST_TIMEOUT_MS,
                 tls_ca: TlsSource = None, tls_cert: TlsSource = None, tls_key: TlsSource = None,
                 token: str | None = None):
        if not topic:
            raise InvalidArgument("an AsyncTable needs its topic")
        self.topic = topic
        self.request_timeout_s = request_timeout_ms / 1000
        self._reader = AsyncReader(bootstrap, request_timeout_ms=request_timeout_ms, tls_ca=tls_ca,
                                   tls_cert=tls_cert, tls_key=tls_key, token=token)
        self.router: AsyncRouter = self._reader.router
        self._lanes: dict[int, _Lane] = {}

    async def partition_of(self, key: Key) -> int:
        return partition_for_key(as_bytes(key, "key"), await self.router.partitions_for(self.topic))

    # ------------------------------------------------------------------ reads
    async def get(self, key: Key) -> Entry | None:
        raw = as_bytes(key, "key")
        partition = await self.partition_of(raw)
        request = pb.GetKeyRequest(topic=self.topic, partition=partition, key=raw)
        answer = await self.router.call_partition(
            self.topic, partition, lambda conn: conn.log.GetKey(request, timeout=self.request_timeout_s))
        if not answer.found:
            return None
        return Entry(raw, answer.value, answer.revision, answer.timestamp_ms, partition)

    async def keys(self, prefix: Key = b"") -> list[bytes]:
        """Every live key starting with `prefix`, in byte order."""
        raw = as_bytes(prefix, "prefix")
        partitions = await self.router.partitions_for(self.topic)
        pages = await asyncio.gather(*(self._partition_keys(p, raw) for p in range(partitions)))
        return list(heapq.merge(*pages))

    async def _partition_keys(self, partition: int, prefix: bytes) -> list[bytes]:
        keys: list[bytes] = []
        while True:
            request = pb.ListKeysRequest(topic=self.topic, partition=partition, prefix=prefix)
            if keys:
                request.start_after = keys[-1]
            answer = await self.router.call_partition(
                self.topic, partition, lambda conn: conn.log.ListKeys(request, timeout=self.request_timeout_s))
            keys += [item.key for item in answer.keys]
            if not answer.more or not answer.keys:
                return keys

    async def history(self, key: Key) -> list[Entry]:
        raw = as_bytes(key, "key")
        partition = await self.partition_of(raw)
        return [Entry(raw, r.value, r.offset, r.timestamp_ms, partition)
                async for r in self._reader.iter_partition(self.topic, partition, EARLIEST, stop_at_end=True)
                if r.key == raw]

    async def watch(self, prefix: Key = b"", after: dict[int, int] | int | None = None,
                    position: dict[int, int] | None = None) -> AsyncIterator[WatchEvent]:
        """The current values, then every change (as Table.watch); `position`, when given, is kept up to date with
        the last revision handed out per partition, for a later watch's `after`."""
        raw = as_bytes(prefix, "prefix")
        partitions = await self.router.partitions_for(self.topic)
        if isinstance(after, int):
            if partitions != 1:
                raise InvalidArgument(f"after as one revision needs a one-partition table; {self.topic!r} has "
                                      f"{partitions}")
            after = {0: after}
        after = dict(after or {})
        position = {} if position is None else position
        position.update(after)
        cursors = []
        for partition in range(partitions):
            if partition in after:
                cursors.append(Cursor(partition, after[partition] + 1, None, True))
                continue
            cursor = await self._reader.cursor(self.topic, partition, EARLIEST, stop_at_end=True)
            latest: dict[bytes, WatchEvent] = {}
            async for r in self._reader._follow(self.topic, [cursor], None):
                if r.key is not None and r.key.startswith(raw):
                    latest[r.key] = WatchEvent(r.key, r.value, r.offset, r.timestamp_ms, partition)
            if latest:
                position[partition] = max(e.revision for e in latest.values())
            for event in sorted((e for e in latest.values() if e.value is not None), key=lambda e: e.revision):
                yield event
            cursors.append(Cursor(partition, cursor.end_offset, None, True))
        async for r in self._reader._follow_cursors(self.topic, cursors, None):
            if r.key is not None and r.key.startswith(raw):
                position[r.partition] = r.offset
                yield WatchEvent(r.key, r.value, r.offset, r.timestamp_ms, r.partition)

    # ------------------------------------------------------------------ writes
    async def put(self, key: Key, value: Value, *, expected_revision: int | None = None,
                  headers: tuple[tuple[str, bytes | None], ...] = ()) -> int:
        raw = as_bytes(key, "key")
        data = None if value is None else as_bytes(value, "value")
        if expected_revision is not None and (type(expected_revision) is not int or expected_revision < -1):
            raise InvalidArgument(f"expected_revision is a revision or NO_REVISION (-1), not {expected_revision!r}")
        partition = await self.partition_of(raw)
        blob, count, max_ts = encode_stream_batch([(time.time_ns() // 1_000_000, raw, data, headers)])
        lane = self._lanes.setdefault(partition, _Lane())
        async with lane.lock:
            request = pb.ProduceRequest(topic=self.topic, partition=partition, producer_id=lane.producer_id,
                                        base_sequence=lane.sequence, record_count=count, max_timestamp_ms=max_ts,
                                        records=blob)
            if expected_revision is not None:
                request.expected_revision = expected_revision
            try:
                answer = await self.router.call_partition(
                    self.topic, partition, lambda conn: conn.log.Produce(request, timeout=self.request_timeout_s))
            except RevisionMismatch:
                lane.sequence += count
                raise
            except UnknownProducerId:
                lane.start_over()
                raise
            except RaftbusError as err:
                if err.retriable:
                    lane.start_over()
                raise
            lane.sequence += count
            return answer.base_offset

    async def delete(self, key: Key, *, expected_revision: int | None = None) -> int:
        return await self.put(key, None, expected_revision=expected_revision)

    async def close(self) -> None:
        await self._reader.close()
