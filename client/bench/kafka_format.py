"""`python -m raftbus.bench.kafka_format`: the CPU per record of each way a batch can cross between the Kafka port
and the SDK, without a cluster (docs/kafka.md, "Record batches"). One JSON line of µs per record.

The batch is RECORDS keyless 100-byte records with timestamps 1 ms apart, as producers send them; each figure is
the best of ROUNDS rounds (the machine is shared: the best round is the one least disturbed).

- broker, Kafka produce, stored as Kafka's batch: `check_batch` (header, CRC-32C, record framing) — what the
  broker does per Kafka batch before it proposes it;
- broker, Kafka fetch of a stored Kafka batch: the base offset replaced (8 bytes per batch);
- broker, Kafka fetch of a batch in raftbus's own format: decoded and re-encoded as a Kafka batch;
- broker, converting once at produce (the alternative): a Kafka batch decoded and re-encoded in raftbus's format;
- SDK: encoding and decoding a batch in raftbus's format and in Kafka's.
"""
from __future__ import annotations

import json
import time

from raftbus.client import kafka_batch, records

RECORDS = 1000
ROUNDS = 30


def _best_us_per_record(fn) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return round(best * 1e6 / RECORDS, 3)


def measure() -> dict:
    rows = [(1_700_000_000_000 + i, None, b"x" * 100, ()) for i in range(RECORDS)]
    kafka = kafka_batch.encode_batch(rows)
    own, _, _ = records.encode_batch(rows)
    stored_own = records.StoredBatch(0, RECORDS, 0, 0, memoryview(own))
    stored_kafka = records.StoredBatch(0, RECORDS, 0, 0, memoryview(kafka))
    return {
        "bench": "kafka_format", "records_per_batch": RECORDS, "record_bytes": 100,
        "broker_kafka_produce_check_us_per_record": _best_us_per_record(
            lambda: kafka_batch.check_batch(kafka, 1 << 26)),
        "broker_raftbus_produce_check_us_per_record": _best_us_per_record(
            lambda: records.check_framing(own, RECORDS)),
        "broker_kafka_fetch_native_us_per_record": _best_us_per_record(
            lambda: b"".join((kafka_batch.base_offset_bytes(7), memoryview(kafka)[8:]))),
        "broker_kafka_fetch_converted_us_per_record": _best_us_per_record(
            lambda: kafka_batch.encode_batch(records.decode_batch(own), base_offset=7)),
        "broker_convert_once_at_produce_us_per_record": _best_us_per_record(
            lambda: records.encode_batch(records.decode_batch(kafka))),
        "sdk_encode_raftbus_us_per_record": _best_us_per_record(lambda: records.encode_batch(rows)),
        "sdk_encode_kafka_us_per_record": _best_us_per_record(lambda: kafka_batch.encode_batch(rows)),
        "sdk_decode_raftbus_us_per_record": _best_us_per_record(
            lambda: records.decode_stored_batch("t", 0, stored_own)),
        "sdk_decode_kafka_us_per_record": _best_us_per_record(
            lambda: records.decode_stored_batch("t", 0, stored_kafka)),
    }


def main() -> int:
    print(json.dumps(measure()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
