"""What one process spends per `Producer.send` record, without a cluster around it.

`python -m raftbus.bench.send_cost [--records N] [--rounds R]` sends N keyless 100-byte records with
`Producer.send` (linger 5 ms, the SDK's defaults otherwise) through a transport that answers every batch at once
on the sender thread, keeps every future, flushes, reads every future's `result()`, and prints one JSON line: the
CPU time per record of the sends (the caller's thread) and of the `result()` reads, the least of R rounds. With a
real cluster the producer's process also runs gRPC's threads; this measures the SDK's own per-record Python, the
part the brokers' speed and the machine's other load move least. Under
`valgrind --tool=cachegrind --cache-sim=no` with `--rounds 1`, the difference between two record counts divided
by the difference in records is the instruction count per record (docs/performance.md).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from raftbus.client.producer import Producer
from raftbus.client.wire import raftbus_pb2 as pb

RECORD_BYTES = 100
TOPIC = "send-cost"
PARTITIONS = 3
LINGER_MS = 5


class AnsweringTransport:
    """Answers every ProduceRequest at once with consecutive offsets per partition."""

    def __init__(self):
        self.next_offset: dict[int, int] = {}
        self.batches = 0

    def partitions_for(self, topic: str) -> int:
        return PARTITIONS

    def send(self, request, done) -> None:
        base = self.next_offset.get(request.partition, 0)
        self.next_offset[request.partition] = base + request.record_count
        self.batches += 1
        done(pb.ProduceResponse(topic=request.topic, partition=request.partition, base_offset=base), None)

    def retry_delay_s(self, err, attempt, topic, partition):
        return None

    def close(self) -> None:
        pass


def run(records: int, rounds: int) -> dict:
    transport = AnsweringTransport()
    value = bytes(RECORD_BYTES)
    send_s = result_s = float("inf")
    read = 0
    contiguous = True
    with Producer(transport=transport, linger_ms=LINGER_MS) as producer:
        send = producer.send
        for _ in range(rounds):
            started = time.process_time()
            futures = [send(TOPIC, value) for _ in range(records)]
            sent = time.process_time()
            producer.flush()
            flushed = time.process_time()
            landed = [future.result()[1:3] for future in futures]  # (partition, offset)
            read_at = time.process_time()
            send_s, result_s = min(send_s, sent - started), min(result_s, read_at - flushed)
            read += len(landed)
            contiguous = contiguous and _contiguous(landed, transport.next_offset)
    return {"records": records, "rounds": rounds, "records_read": read, "batches": transport.batches,
            "offsets_sent": sum(transport.next_offset.values()), "offsets_contiguous": contiguous,
            "send_cpu_us_per_record": round(send_s * 1e6 / records, 3),
            "result_cpu_us_per_record": round(result_s * 1e6 / records, 3)}


def _contiguous(landed: list[tuple[int, int]], next_offset: dict[int, int]) -> bool:
    """Whether this round's records hold, per partition, every offset up to the transport's next one, once each
    (the earlier rounds' offsets come first)."""
    by_partition: dict[int, list[int]] = {}
    for partition, offset in landed:
        by_partition.setdefault(partition, []).append(offset)
    return all(sorted(offsets) == list(range(next_offset[partition] - len(offsets), next_offset[partition]))
               for partition, offsets in by_partition.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raftbus.bench.send_cost",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="records per round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; the least CPU time of them is reported")
    args = parser.parse_args(argv)
    if args.records < 1 or args.rounds < 1:
        parser.error("--records and --rounds must be >= 1")
    print(json.dumps(run(args.records, args.rounds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
