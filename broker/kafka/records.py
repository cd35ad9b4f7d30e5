"""Stored batches as Kafka's record sets: what a Fetch answer carries for one partition.

A batch a Kafka client produced is stored as it arrived (client/kafka_batch.py), so it goes back out with only
its first 8 bytes, the base offset, replaced by the offset it was stored at (the CRC does not cover them): no
record is touched. A batch in raftbus's own record format (client/records.py) is re-encoded as one Kafka batch,
record by record, the one place where the Kafka port decodes records.
"""
from __future__ import annotations

from raftbus.client import kafka_batch
from raftbus.client.records import decode_batch, iter_stored_batches


def wire_records(stored: bytes) -> bytes:
    """The Kafka record set of a fetched buffer of stored batches (client/records.py's fetch layout)."""
    parts = []
    for batch in iter_stored_batches(stored):
        blob = batch.blob
        if kafka_batch.is_kafka_batch(blob):
            parts.append(kafka_batch.base_offset_bytes(batch.base_offset))
            parts.append(blob[8:])
        else:
            parts.append(converted(batch))
    return b"".join(parts)


def converted(batch) -> bytes:
    """One batch of raftbus's own records as a Kafka batch at the same offsets (CreateTime timestamps)."""
    records = decode_batch(batch.blob)
    return kafka_batch.encode_batch(records, base_offset=batch.base_offset)
