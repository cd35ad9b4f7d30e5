"""Client traffic per partition: records and bytes in (produce, enqueue) and out (fetch, lease).

Counted from the gRPC requests and answers that succeeded, on the broker that served them (the partition's
leader), so summing a partition's series over brokers counts every record once.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from raftbus.client.queues.codec import iter_messages
from raftbus.client.records import iter_stored_batches

_LABELS = ("topic", "partition")


def fetched_records(batches: bytes) -> int:
    """Records in the stored batches of a fetch answer (reads only the batch headers)."""
    return sum(batch.record_count for batch in iter_stored_batches(batches))


def packed_messages(packed: bytes) -> int:
    """Messages in a packed lease answer."""
    return sum(1 for _ in iter_messages(packed))


class Traffic:
    def __init__(self, registry: CollectorRegistry):
        def counter(name: str, text: str) -> Counter:
            return Counter(name, text, _LABELS, registry=registry)

        self.records_in = counter("raftbus_partition_records_in", "Records produced or messages enqueued")
        self.bytes_in = counter("raftbus_partition_bytes_in", "Record batch bytes produced or message bytes enqueued")
        self.records_out = counter("raftbus_partition_records_out", "Records fetched or messages leased")
        self.bytes_out = counter("raftbus_partition_bytes_out", "Stored batch bytes fetched or message bytes leased")

    def add_in(self, topic: str, partition: int, records: int, size_bytes: int) -> None:
        labels = (topic, str(partition))
        self.records_in.labels(*labels).inc(records)
        self.bytes_in.labels(*labels).inc(size_bytes)

    def add_out(self, topic: str, partition: int, records: int, size_bytes: int) -> None:
        if records <= 0:
            return
        labels = (topic, str(partition))
        self.records_out.labels(*labels).inc(records)
        self.bytes_out.labels(*labels).inc(size_bytes)

    # ------------------------------------------------------------------ per method (request, answer)
    def produced(self, request, response) -> None:
        if not response.HasField("error") and not response.duplicate:
            self.add_in(request.topic, request.partition, request.record_count, len(request.records))

    def fetched(self, request, response) -> None:
        if not response.HasField("error"):
            self.add_out(request.topic, request.partition, fetched_records(response.batches),
                         len(response.batches))

    def enqueued(self, request, response) -> None:
        fresh = [m for m, r in zip(request.messages, response.results) if not r.duplicate]
        if fresh:
            self.add_in(request.topic, request.partition, len(fresh), sum(len(m.record) for m in fresh))

    def leased(self, request, response) -> None:
        if response.HasField("error"):
            return
        if response.packed_messages:
            packed = response.packed_messages
            self.add_out(request.topic, request.partition, packed_messages(packed), len(packed))
        else:
            size = sum(len(m.record) for m in response.messages)
            self.add_out(request.topic, request.partition, len(response.messages), size)

    def observers(self) -> dict:
        """gRPC method name → what to count from (request, answer)."""
        return {"Produce": self.produced, "Fetch": self.fetched, "FetchStream": self.fetched,
                "Enqueue": self.enqueued, "Lease": self.leased, "LeaseStream": self.leased}
