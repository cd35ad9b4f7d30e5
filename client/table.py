"""Table: a key-value table over a compacted stream topic (docs/compaction.md, "Key-value tables").

A key lives in the partition the producers' partitioner gives it (murmur2, as Kafka's), so what Kafka clients and
the SDK's producers write to the topic is in the table too. Reads by key go to the partition's leader, which
answers from its key index once the leader confirmed its leadership for the read (ReadIndex: linearizable); writes are one-record batches of an
idempotent producer (one producer id and sequence per partition), so a retried put is applied once and a retried
compare-and-set gets its first answer again.
"""
from __future__ import annotations

import heapq
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

from raftbus.client import settings
from raftbus.client.credentials import TlsSource
from raftbus.client.errors import InvalidArgument, RaftbusError, RevisionMismatch, UnknownProducerId
from raftbus.client.murmur2 import partition_for_key
from raftbus.client.reader import EARLIEST, Cursor, Reader
from raftbus.client.records import encode_stream_batch
from raftbus.client.router import Router
from raftbus.client.wire import raftbus_pb2 as pb

NO_REVISION = -1
Key = bytes | str
Value = bytes | str | None


class Entry(NamedTuple):
    """A key's value at a revision (the offset of its record); `value` None for a delete (history only)."""

    key: bytes
    value: bytes | None
    revision: int
    timestamp_ms: int
    partition: int


class WatchEvent(NamedTuple):
    """A key's value as a watch sees it: `value` None when the key was deleted."""

    key: bytes
    value: bytes | None
    revision: int
    timestamp_ms: int
    partition: int

    @property
    def deleted(self) -> bool:
        return self.value is None


def as_bytes(data: Key, what: str) -> bytes:
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise InvalidArgument(f"a table {what} is bytes or str, not {type(data).__name__}")


class _Lane:
    """One partition's idempotent producer: its id and next sequence; a lock keeps one put in flight."""

    def __init__(self):
        self.lock = threading.Lock()
        self.producer_id = os.urandom(16)
        self.sequence = 0

    def start_over(self) -> None:
        """A fresh producer id from sequence 0 (after an outcome that cannot be known, or a forgotten producer)."""
        self.producer_id, self.sequence = os.urandom(16), 0


class Table:
    """A key-value table over the compacted topic `topic`; a context manager that closes its channels."""

    NO_REVISION = NO_REVISION

    def __init__(self, bootstrap: str | list[str] | None = None, topic: str = "", *,
                 request_timeout_ms: int = settings.REQUEST_TIMEOUT_MS,
                 tls_ca: TlsSource = None, tls_cert: TlsSource = None, tls_key: TlsSource = None,
                 token: str | None = None, router: Router | None = None,
                 clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000):
        if not topic:
            raise InvalidArgument("a Table needs its topic")
        self.topic = topic
        self._owns_router = router is None  # a router handed in is its owner's to close
        self.router = router or Router(bootstrap, request_timeout_ms=request_timeout_ms, tls_ca=tls_ca,
                                       tls_cert=tls_cert, tls_key=tls_key, token=token)
        self.request_timeout_s = request_timeout_ms / 1000
        self._clock_ms = clock_ms
        self._lanes: dict[int, _Lane] = {}
        self._lanes_lock = threading.Lock()
        self._reader: Reader | None = None

    # ------------------------------------------------------------------ reads
    def partition_of(self, key: Key) -> int:
        return partition_for_key(as_bytes(key, "key"), self.router.partitions_for(self.topic))

    def get(self, key: Key) -> Entry | None:
        """The key's latest value, or None when it has none (never written, or deleted). Linearizable."""
        raw = as_bytes(key, "key")
        partition = self.partition_of(raw)
        request = pb.GetKeyRequest(topic=self.topic, partition=partition, key=raw)
        answer = self.router.call_partition(self.topic, partition,
                                            lambda conn: conn.log.GetKey(request, timeout=self.request_timeout_s))
        if not answer.found:
            return None
        return Entry(raw, answer.value, answer.revision, answer.timestamp_ms, partition)

    def revision(self, key: Key) -> int:
        """The key's latest revision, NO_REVISION when it has no value (what a compare-and-set expects)."""
        entry = self.get(key)
        return NO_REVISION if entry is None else entry.revision

    def keys(self, prefix: Key = b"") -> Iterator[bytes]:
        """Every live key starting with `prefix`, in byte order (each partition's index page by page, merged)."""
        raw = as_bytes(prefix, "prefix")
        pages = [self._partition_keys(p, raw) for p in range(self.router.partitions_for(self.topic))]
        for key, _ in heapq.merge(*pages):
            yield key

    def _partition_keys(self, partition: int, prefix: bytes) -> Iterator[tuple[bytes, int]]:
        start_after = None
        while True:
            request = pb.ListKeysRequest(topic=self.topic, partition=partition, prefix=prefix)
            if start_after is not None:
                request.start_after = start_after
            answer = self.router.call_partition(
                self.topic, partition, lambda conn: conn.log.ListKeys(request, timeout=self.request_timeout_s))
            for item in answer.keys:
                yield item.key, item.revision
            if not answer.more or not answer.keys:
                return
            start_after = answer.keys[-1].key

    def history(self, key: Key) -> list[Entry]:
        """The key's records still in the log, oldest first (a delete has value None): compaction keeps at least
        the latest. Reads the key's partition from its log start to its high watermark."""
        raw = as_bytes(key, "key")
        partition = self.partition_of(raw)
        return [Entry(raw, r.value, r.offset, r.timestamp_ms, partition)
                for r in self._reader_().iter_partition(self.topic, partition, EARLIEST, stop_at_end=True)
                if r.key == raw]

    def watch(self, prefix: Key = b"", after: dict[int, int] | int | None = None) -> "Watch":
        """The current values of the keys starting with `prefix`, then every change (see Watch)."""
        return Watch(self, as_bytes(prefix, "prefix"), after)

    # ------------------------------------------------------------------ writes
    def put(self, key: Key, value: Value, *, expected_revision: int | None = None,
            headers: tuple[tuple[str, bytes | None], ...] = ()) -> int:
        """Write the key's value; its revision. With `expected_revision`, only while the key's latest revision is
        that one (NO_REVISION: the key has no value): else RevisionMismatch, and nothing is written."""
        raw = as_bytes(key, "key")
        data = None if value is None else as_bytes(value, "value")
        if expected_revision is not None and (type(expected_revision) is not int or expected_revision < -1):
            raise InvalidArgument(f"expected_revision is a revision or NO_REVISION (-1), not {expected_revision!r}")
        partition = self.partition_of(raw)
        blob, count, max_ts = encode_stream_batch([(self._clock_ms(), raw, data, headers)])
        return self._send(partition, blob, count, max_ts, expected_revision)

    def delete(self, key: Key, *, expected_revision: int | None = None) -> int:
        """Delete the key (a tombstone); its revision. `expected_revision` as for put."""
        return self.put(key, None, expected_revision=expected_revision)

    def _send(self, partition: int, blob: bytes, count: int, max_ts: int, expected: int | None) -> int:
        lane = self._lane(partition)
        with lane.lock:
            request = pb.ProduceRequest(topic=self.topic, partition=partition, producer_id=lane.producer_id,
                                        base_sequence=lane.sequence, record_count=count, max_timestamp_ms=max_ts,
                                        records=blob)
            if expected is not None:
                request.expected_revision = expected
            try:
                answer = self.router.call_partition(
                    self.topic, partition, lambda conn: conn.log.Produce(request, timeout=self.request_timeout_s))
            except RevisionMismatch:
                lane.sequence += count  # the partition remembers the refusal under this sequence
                raise
            except UnknownProducerId:
                lane.start_over()
                raise
            except RaftbusError as err:
                if err.retriable:  # applied or not: nobody knows, so this sequence is never used again
                    lane.start_over()
                raise
            lane.sequence += count
            return answer.base_offset

    def _lane(self, partition: int) -> _Lane:
        with self._lanes_lock:
            lane = self._lanes.get(partition)
            if lane is None:
                lane = self._lanes[partition] = _Lane()
            return lane

    def _reader_(self) -> Reader:
        if self._reader is None:
            self._reader = Reader(router=self.router, request_timeout_ms=int(self.request_timeout_s * 1000))
        return self._reader

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        reader, self._reader = self._reader, None
        if self._owns_router:
            if reader is not None:
                reader.close()  # closes the router too
            else:
                self.router.close()
        elif reader is not None and reader._ahead is not None:  # the router stays with its owner
            reader._ahead.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "Table":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Watch:
    """An iterator of WatchEvents: first the current value of every key starting with the prefix (each partition
    read from its log start to the high watermark it had, its latest value per key), then every change in log
    order per partition, each once, following leader changes as the Reader does. `position` maps each partition to
    the last revision handed out; a new watch with `after=position` goes on right after it (no snapshot for the
    partitions it names). A watch that falls more than the topic's min_compaction_lag_ms behind may see only the
    latest of several changes of a key."""

    def __init__(self, table: Table, prefix: bytes, after: dict[int, int] | int | None):
        self._table = table
        self._prefix = prefix
        partitions = table.router.partitions_for(table.topic)
        if isinstance(after, int):
            if partitions != 1:
                raise InvalidArgument(f"after as one revision needs a one-partition table; {table.topic!r} has "
                                      f"{partitions}: give {{partition: revision}}")
            after = {0: after}
        self._after = dict(after or {})
        if any(type(p) is not int or not 0 <= p < partitions for p in self._after):
            raise InvalidArgument(f"after names partitions of {table.topic!r} (0 to {partitions - 1})")
        self.position: dict[int, int] = {p: r for p, r in self._after.items()}
        self._partitions = partitions
        self._events = self._run()

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> WatchEvent:
        return next(self._events)

    def _run(self) -> Iterator[WatchEvent]:
        reader = self._table._reader_()
        topic = self._table.topic
        cursors = []
        for partition in range(self._partitions):
            if partition in self._after:
                cursors.append(Cursor(partition, self._after[partition] + 1, None, True))
                continue
            snapshot, end = self._snapshot(reader, partition)
            yield from snapshot
            cursors.append(Cursor(partition, end, None, True))
        for record in reader._follow_cursors(topic, cursors, None):
            if record.key is not None and record.key.startswith(self._prefix):
                self.position[record.partition] = record.offset
                yield WatchEvent(record.key, record.value, record.offset, record.timestamp_ms, record.partition)

    def _snapshot(self, reader: Reader, partition: int) -> tuple[list[WatchEvent], int]:
        cursor = reader.cursor(self._table.topic, partition, EARLIEST, stop_at_end=True)
        latest: dict[bytes, WatchEvent] = {}
        for record in reader._follow(self._table.topic, cursor, None):
            if record.key is not None and record.key.startswith(self._prefix):
                latest[record.key] = WatchEvent(record.key, record.value, record.offset, record.timestamp_ms,
                                                partition)
        events = sorted((e for e in latest.values() if e.value is not None), key=lambda e: e.revision)
        if events or latest:
            self.position[partition] = max(e.revision for e in latest.values())
        return events, cursor.end_offset

    def close(self) -> None:
        self._events.close()
