"""What one process spends decoding a fetched stream batch into Records, without a cluster around it.

`python -m raftbus.bench.decode_cost [--records N] [--record-bytes B] [--rounds R]` encodes one stream batch of
N keyless records of B bytes as the Producer does (`encode_stream_batch`: a Kafka record batch), stores it as a
fetch answer carries it, then decodes it R times with `decode_stored_batch` (what the Reader and the Consumer
call), reading each record's value length as an application would, and prints one JSON line: the CPU time per
record of the least of the rounds, and whether the Records read back what was written.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from raftbus.client.records import decode_stored_batch, encode_stored_batch, encode_stream_batch, iter_stored_batches

TIMESTAMP_MS = 1_700_000_000_000


def run(records: int, record_bytes: int, rounds: int) -> dict:
    value = os.urandom(record_bytes)
    blob, count, max_timestamp_ms = encode_stream_batch([(TIMESTAMP_MS, None, value, None)] * records)
    batch = next(iter_stored_batches(encode_stored_batch(0, count, TIMESTAMP_MS, max_timestamp_ms, blob)))
    best_s = float("inf")
    decoded = []
    for _ in range(rounds):
        started = time.process_time()
        decoded = decode_stored_batch("decode-cost", 0, batch)
        value_bytes = sum(len(record.value) for record in decoded)
        best_s = min(best_s, time.process_time() - started)
    intact = [r.offset for r in decoded] == list(range(records)) and value_bytes == records * record_bytes and \
        all(r.value == value and r.timestamp_ms == TIMESTAMP_MS for r in decoded)
    return {"records": records, "record_bytes": record_bytes, "rounds": rounds, "records_intact": intact,
            "decode_cpu_ns_per_record": round(best_s * 1e9 / records)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raftbus.bench.decode_cost",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=8_700, help="records in the batch (a full 1 MiB batch of "
                                                                   "100-byte records holds ~8,700)")
    parser.add_argument("--record-bytes", type=int, default=100, help="bytes of each record's value")
    parser.add_argument("--rounds", type=int, default=300, help="rounds; the least CPU time of them is reported")
    args = parser.parse_args(argv)
    if args.records < 1 or args.record_bytes < 0 or args.rounds < 1:
        parser.error("--records and --rounds must be >= 1 and --record-bytes >= 0")
    print(json.dumps(run(args.records, args.record_bytes, args.rounds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
