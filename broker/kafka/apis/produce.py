"""Produce (0): Kafka record batches appended to raftbus partitions as they are (docs/kafka.md, "Record batches").

Each partition's record set is split into its batches; each batch's header is read (no record is decoded) and
the batch is proposed through LogService.submit_produce, which checks its CRC-32C and framing before anything is
replicated. acks=1 and acks=all are both answered once the batch is committed on a majority and applied on this
leader; acks=0 gets no answer. An idempotent producer's id and epoch name its raftbus producer id, and its base
sequence is the batch's: a retried batch among the partition's last five of that producer is answered with its
original base offset, a gap with OUT_OF_ORDER_SEQUENCE_NUMBER.
"""
from __future__ import annotations

import asyncio
import struct

from raftbus.client import errors, kafka_batch

from raftbus.broker.context import partition_group_id
from raftbus.broker.kafka import codes
from raftbus.broker.kafka.apis.common import leader_endpoints, partition_error, wrong_kind
from raftbus.broker.kafka.schema import millis
from raftbus.broker.kafka.session import PRODUCE, TOPIC

_KAFKA_PRODUCER = struct.Struct(">2sqhi")  # b"KP", producer id, epoch, 0: 16 bytes, raftbus's producer id size
LOG_APPEND_TIME = "LogAppendTime"


def producer_key(producer_id: int, producer_epoch: int) -> bytes:
    """The raftbus producer id of a Kafka producer id and epoch (a new epoch starts its sequences again at 0, as
    in Kafka)."""
    return _KAFKA_PRODUCER.pack(b"KP", producer_id, producer_epoch, 0)


def split_batches(records) -> list[memoryview]:
    """The batches of a record set (each by its batch_length); CorruptBatch when one runs past the end."""
    view = memoryview(records)
    batches, pos, end = [], 0, len(view)
    while pos < end:
        if end - pos < kafka_batch.HEADER_BYTES:
            raise errors.CorruptBatch(f"record set ends with {end - pos} bytes, less than a batch header")
        (length,) = struct.unpack_from(">i", view, pos + 8)
        if length < kafka_batch.HEADER_BYTES - 12 or pos + 12 + length > end:
            raise errors.CorruptBatch(f"record batch at byte {pos} claims {length + 12} bytes, "
                                      f"{end - pos} remain")
        batches.append(view[pos:pos + 12 + length])
        pos += 12 + length
    if not batches:
        raise errors.EmptyBatch("a produce request needs at least one record batch per partition")
    return batches


def handler(services):
    context, log = services.context, services.log

    def submit(session, name: str, partition: int, records):
        """The futures of one partition's batches, proposed in order; a typed error raised when refused."""
        if session.denied(TOPIC, name, PRODUCE):
            raise errors.PermissionDenied(f"may not produce to topic {name!r}")
        topic = context.topic(name)
        if topic.kind != "stream":
            raise wrong_kind(topic)
        log_append = topic.timestamp_type == LOG_APPEND_TIME
        futures = []
        for blob in split_batches(records or b""):
            header = kafka_batch.read_header(blob)
            if header.attributes & (kafka_batch.TRANSACTIONAL | kafka_batch.CONTROL):
                raise errors.CorruptBatch("transactional and control batches are not supported")
            producer = b""
            if header.producer_id >= 0:
                if header.base_sequence < 0:
                    raise errors.CorruptBatch("an idempotent batch needs a base sequence >= 0")
                producer = producer_key(header.producer_id, header.producer_epoch)
            now_ms, max_ts = None, header.max_timestamp
            if log_append:
                kafka_batch.check_crc(blob, header)  # before the header changes and gets a new CRC
                now_ms = max_ts = context.clock.now_ms()
                blob = kafka_batch.with_log_append_time(blob, now_ms)
            futures.append(log.submit_produce(
                name, partition, producer_id=producer, base_sequence=max(header.base_sequence, 0),
                record_count=header.record_count, max_timestamp_ms=max_ts, records=bytes(blob), now_ms=now_ms))
        return futures, log_append

    async def settle(name: str, partition: int, submitted, timeout_s: float) -> dict:
        if isinstance(submitted, BaseException):
            return {"index": partition, **partition_error(services, submitted, name, partition)}
        futures, log_append = submitted
        try:
            results = [await asyncio.wait_for(asyncio.wrap_future(f), timeout_s) for f in futures]
        except asyncio.TimeoutError:
            return {"index": partition, "error_code": codes.REQUEST_TIMED_OUT,
                    "error_message": f"not committed within {timeout_s:.1f} s"}
        except errors.RaftbusError as exc:  # the group failed the command (leadership lost, stopped)
            return {"index": partition, **partition_error(services, exc, name, partition)}
        for result in results:
            if isinstance(result, errors.RaftbusError):
                return {"index": partition, **partition_error(services, result, name, partition)}
        first = results[0]
        replica = context.partitions.get(partition_group_id(context.topic(name).topic_id, partition))
        log_start = replica.state_machine.offsets()[0] if replica is not None else -1
        return {"index": partition, "error_code": codes.NONE, "base_offset": first.base_offset,
                "log_append_time": first.append_time_ms if log_append else -1, "log_start_offset": log_start}

    async def produce(request) -> dict | None:
        body = request.body
        acks = body.acks
        parts = [(t.name, p.index, p.records) for t in body.topic_data for p in t.partition_data]
        if acks not in (0, 1, -1) or body.transactional_id is not None:
            code = codes.INVALID_REQUIRED_ACKS if acks not in (0, 1, -1) else codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            return _answer([(name, {"index": p, "error_code": code}) for name, p, _ in parts], services)
        submitted = []
        for name, partition, records in parts:
            try:
                submitted.append(submit(request.session, name, partition, records))
            except errors.RaftbusError as exc:
                submitted.append(exc)
        if acks == 0:
            return None
        timeout_ms = millis(body.timeout)
        timeout_s = min(timeout_ms if timeout_ms > 0 else services.settings.produce_timeout_ms,
                        services.settings.produce_timeout_ms) / 1000
        answers = await asyncio.gather(*(settle(name, p, s, timeout_s)
                                         for (name, p, _), s in zip(parts, submitted)))
        return _answer([(name, a) for (name, _, _), a in zip(parts, answers)], services)

    return produce


def _answer(pairs, services) -> dict:
    by_topic: dict[str, list] = {}
    for name, answer in pairs:
        by_topic.setdefault(name, []).append(answer)
    return {"responses": [{"name": name, "partition_responses": answers} for name, answers in by_topic.items()],
            "node_endpoints": leader_endpoints(services, [a for _, a in pairs])}
