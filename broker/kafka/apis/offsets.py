"""ListOffsets (2): the earliest (-2) or latest (-1) offset of a partition, or the first offset whose record
timestamp is at or after a time. The time index finds the batch (its running max timestamp); that one batch is
decoded to find the record, so the answer is the record's offset and timestamp, as Kafka gives them."""
from __future__ import annotations

import asyncio

from raftbus.client import errors, kafka_batch
from raftbus.client.records import decode_batch, iter_stored_batches

from raftbus.broker.kafka import codes
from raftbus.broker.kafka.apis.common import partition_error, wrong_kind
from raftbus.broker.kafka.session import CONSUME, TOPIC

EARLIEST, LATEST = -2, -1


def first_at_or_after(stored: bytes, timestamp_ms: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or after `timestamp_ms` in a fetched buffer of stored batches."""
    for batch in iter_stored_batches(stored):
        if batch.max_timestamp_ms < timestamp_ms:
            continue
        if kafka_batch.is_kafka_batch(batch.blob):
            rows = [(r.offset, r.timestamp_ms) for r in kafka_batch.decode_batch(batch.blob, batch.base_offset)]
        else:
            rows = [(batch.base_offset + i, r[0]) for i, r in enumerate(decode_batch(batch.blob))]
        for offset, ts in rows:
            if ts >= timestamp_ms:
                return offset, ts
    return None


def handler(services):
    context, log = services.context, services.log
    settings = services.settings

    async def one(session, topic: str, partition: int, timestamp_ms: int) -> dict:
        answer = {"partition_index": partition}
        try:
            if session.denied(TOPIC, topic, CONSUME):
                raise errors.PermissionDenied(f"may not read offsets of topic {topic!r}")
            found = context.metadata_sm.topic(topic)
            if found is not None and found.kind != "stream":
                raise wrong_kind(found)
            replica, confirmed = log.confirm_leader(topic, partition)
            await asyncio.wait_for(asyncio.wrap_future(confirmed), settings.produce_timeout_ms / 1000)
            log_start, high_watermark = replica.state_machine.offsets()
            if timestamp_ms == EARLIEST:
                return {**answer, "error_code": codes.NONE, "offset": log_start, "timestamp": -1}
            if timestamp_ms == LATEST:
                return {**answer, "error_code": codes.NONE, "offset": high_watermark, "timestamp": -1}
            if timestamp_ms < 0:
                raise errors.InvalidArgument(f"timestamp {timestamp_ms} is not -2 (earliest), -1 (latest) or a time")
            start = replica.state_machine.offset_for_time(timestamp_ms)
            while start < high_watermark:
                read = replica.state_machine.read(start, settings.fetch_bytes_max)
                hit = first_at_or_after(read.batches, timestamp_ms)
                if hit is not None:
                    return {**answer, "error_code": codes.NONE, "offset": hit[0], "timestamp": hit[1]}
                last = list(iter_stored_batches(read.batches))[-1]
                start = last.base_offset + last.record_count
            return {**answer, "error_code": codes.NONE, "offset": -1, "timestamp": -1}
        except asyncio.TimeoutError:
            return {**answer, "error_code": codes.REQUEST_TIMED_OUT}
        except Exception as exc:
            return {**answer, **partition_error(services, exc, topic, partition)}

    async def list_offsets(request) -> dict:
        wanted = [(t.name, p.partition_index, p.timestamp) for t in request.body.topics for p in t.partitions]
        answers = await asyncio.gather(*(one(request.session, *w) for w in wanted))
        by_topic: dict[str, list] = {}
        for (name, _, _), answer in zip(wanted, answers):
            answer.pop("error_message", None)
            answer.pop("current_leader", None)
            by_topic.setdefault(name, []).append(answer)
        return {"topics": [{"name": n, "partitions": a} for n, a in by_topic.items()]}

    return list_offsets
