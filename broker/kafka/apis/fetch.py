"""Fetch (1): committed batches from partition leaders, long-polled up to max_wait until min_bytes are there,
within max_bytes and each partition's partition_max_bytes (at least one batch, as KIP-74 asks), with incremental
fetch sessions (broker/kafka/fetch_sessions.py).

Reads are linearizable as the gRPC port's are: a partition is read once its leader confirmed, by a heartbeat round
started after the request arrived and acknowledged by a majority in its term, that it still leads, and applied what
was committed before (ReadIndex, LogService.confirm_leader). No transactions: the last stable offset
is the high watermark and isolation levels read the same.
"""
from __future__ import annotations

import asyncio
import time

from raftbus.client import errors

from raftbus.broker.kafka import codes
from raftbus.broker.kafka.apis.common import leader_endpoints, partition_error, wrong_kind
from raftbus.broker.kafka.fetch_sessions import FetchSessions
from raftbus.broker.kafka.records import wire_records
from raftbus.broker.kafka.schema import millis
from raftbus.broker.kafka.session import CONSUME, TOPIC


def handler(services, sessions: FetchSessions):
    context, log, waits = services.context, services.log, services.waits
    settings = services.settings

    async def confirm(session, topic: str, partition: int):
        """The partition's replica here once its leadership is confirmed for this read, or the answer of the error
        that stopped it (the confirmations of every partition of a request are awaited together)."""
        try:
            if session.denied(TOPIC, topic, CONSUME):
                raise errors.PermissionDenied(f"may not consume topic {topic!r}")
            found = context.metadata_sm.topic(topic)
            if found is not None and found.kind != "stream":
                raise wrong_kind(found)
            replica, confirmed = log.confirm_leader(topic, partition)
            await asyncio.wait_for(asyncio.wrap_future(confirmed), settings.produce_timeout_ms / 1000)
            return replica
        except asyncio.TimeoutError:
            return {"partition_index": partition, "error_code": codes.REQUEST_TIMED_OUT, "high_watermark": -1}
        except Exception as exc:  # typed refusals; anything else is answered UNKNOWN_SERVER_ERROR
            return {"partition_index": partition, **partition_error(services, exc, topic, partition),
                    "high_watermark": -1}

    def read(replica, topic: str, partition: int, offset: int, max_bytes: int) -> tuple[dict, int]:
        """One partition's answer (records as Kafka's wire bytes, at most `max_bytes` but for one batch) and its
        record bytes."""
        try:
            found = replica.state_machine.read(offset, max(max_bytes, 1))
        except errors.OffsetOutOfRange as exc:
            log_start, high_watermark = replica.state_machine.offsets()
            return {"partition_index": partition, **partition_error(services, exc, topic, partition),
                    "high_watermark": high_watermark, "last_stable_offset": high_watermark,
                    "log_start_offset": log_start}, 0
        records = wire_records(found.batches) if found.batches else b""
        return {"partition_index": partition, "error_code": codes.NONE, "high_watermark": found.high_watermark,
                "last_stable_offset": found.high_watermark, "log_start_offset": found.log_start_offset,
                "aborted_transactions": [], "preferred_read_replica": -1, "records": records}, len(records)

    async def read_all(session, wanted, max_bytes: int):
        """Every wanted partition's answer, read in request order within what is left of `max_bytes` (a partition
        past it is answered without records: they wait for the next fetch), and the groups read from."""
        replicas = await asyncio.gather(*(confirm(session, t, p) for t, p, _, _ in wanted))
        group_ids: list[str] = []
        answers, total = [], 0
        for (topic, partition, offset, partition_max), replica in zip(wanted, replicas):
            if isinstance(replica, dict):
                answers.append(((topic, partition), replica))
                continue
            group_ids.append(replica.group_id)
            if total >= max_bytes:
                log_start, high_watermark = replica.state_machine.offsets()
                answer, size = {"partition_index": partition, "error_code": codes.NONE,
                                "high_watermark": high_watermark, "last_stable_offset": high_watermark,
                                "log_start_offset": log_start, "aborted_transactions": [],
                                "preferred_read_replica": -1, "records": b""}, 0
            else:
                answer, size = read(replica, topic, partition, offset, min(partition_max, max_bytes - total))
            total += size
            answers.append(((topic, partition), answer))
        return answers, total, group_ids

    async def fetch(request) -> dict:
        body = request.body
        version = request.version
        requested = [(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
                     for t in body.topics for p in t.partitions]
        forgotten = [(t.topic, p) for t in (getattr(body, "forgotten_topics_data", None) or ()) for p in t.partitions]
        session_id, epoch = getattr(body, "session_id", 0), getattr(body, "session_epoch", -1)
        fetch_session, wanted, error = sessions.resolve(session_id, epoch, requested, forgotten)
        if error:
            return {"error_code": error, "session_id": 0, "responses": []}
        incremental = session_id != 0 and epoch > 0
        max_bytes = min(getattr(body, "max_bytes", 2**31 - 1), settings.fetch_bytes_max)
        wait_s = min(max(millis(body.max_wait), 0), settings.fetch_wait_max_ms) / 1000
        deadline = time.monotonic() + wait_s
        while True:
            answers, total, group_ids = await read_all(request.session, wanted, max_bytes)
            remaining = deadline - time.monotonic()
            if total >= max(body.min_bytes, 1) or remaining <= 0 or not group_ids or \
                    any(a["error_code"] for _, a in answers):
                break
            await waits.wait(group_ids, remaining)
        by_topic: dict[str, list] = {}
        for key, answer in answers:
            # an error answer carries empty records, never null, as Kafka's brokers send it: librdkafka refuses a
            # null record set ("invalid MessageSetSize -1") and fetches the partition again at once, forever
            answer.setdefault("records", b"")
            if FetchSessions.worth_answering(fetch_session, incremental, key, answer):
                by_topic.setdefault(key[0], []).append(answer)
        return {"error_code": codes.NONE, "session_id": fetch_session.session_id if fetch_session else 0,
                "responses": [{"topic": t, "partitions": a} for t, a in by_topic.items()],
                "node_endpoints": leader_endpoints(services, [a for _, a in answers]) if version >= 16 else []}

    return fetch
