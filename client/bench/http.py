"""`raftbus bench http`: produce and lease+ack through one `raftbus http` gateway process.

The gateway runs as its own process in front of the cluster; BENCH_CONNECTIONS threads of this process send
JSON over keep-alive connections, as scripts and services calling the API would.
produce: `--records` records of `--record-bytes` ASCII characters to a `--partitions` topic, BENCH_RECORDS_PER_REQUEST
  per POST /v1/topics/{topic}/records — records_per_s, requests_per_s, mb_per_s from the first request to the last
  answer; request_latency_p50/p99_ms per request under that load; latency_p50/p99_ms of `--http-light-requests`
  (BENCH_LIGHT_LOAD_REQUESTS) single-record requests sent one after another on the quiet gateway (request to acknowledged answer).
queue: `--messages` messages enqueued BENCH_RECORDS_PER_REQUEST per POST /v1/queues/{topic}/messages
  (enqueue_per_s), then leased BENCH_LEASE_MESSAGES per POST .../leases and acked per lease batch with one
  POST .../acks (lease_ack_per_s, from the first lease to the last ack).
Every answer is an acknowledgement after a majority commit on the partition's replicas, as the SDK's.
"""
from __future__ import annotations

import random
import string
import threading
import time

from raftbus.client import Admin
from raftbus.client.errors import InternalError

from raftbus.gateway import settings
from raftbus.bench.http_gateway import Connection, gateway_process, item_errors


def percentile_ms(values_s: list[float], fraction: float) -> float | None:
    if not values_s:
        return None
    ordered = sorted(values_s)
    return round(ordered[min(len(ordered) - 1, max(0, int(fraction * len(ordered) + 0.999999) - 1))] * 1000, 3)


def shares(total: int, size: int) -> list[int]:
    """`total` items as requests of at most `size`."""
    return [min(size, total - start) for start in range(0, total, size)]


def run_connections(address: str, work) -> tuple[float, list[float]]:
    """Run work(connection, latencies) on BENCH_CONNECTIONS threads; (elapsed s, per-request latencies s)."""
    latencies: list[float] = []
    failures: list[BaseException] = []

    def body():
        connection = Connection(address)
        try:
            work(connection, latencies)
        except BaseException as exc:  # reported after the run
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=body) for _ in range(settings.BENCH_CONNECTIONS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return time.perf_counter() - started, latencies


def timed(connection: Connection, latencies: list[float], method: str, path: str, body: dict) -> dict:
    sent = time.perf_counter()
    answer = connection.call(method, path, body)
    latencies.append(time.perf_counter() - sent)
    return answer


def checked(items: list[dict]) -> list[dict]:
    errors = item_errors(items)
    if errors:
        raise errors[0]
    return items


def bench_produce(address: str, topic: str, records: int, value: str, light_requests: int) -> dict:
    path = f"/v1/topics/{topic}/records"
    light = Connection(address)
    light_latencies: list[float] = []
    for _ in range(light_requests):
        checked(timed(light, light_latencies, "POST", path, {"records": [{"value": value}]})["offsets"])
    light.close()
    requests = shares(records, settings.BENCH_RECORDS_PER_REQUEST)
    lock = threading.Lock()

    def work(connection, latencies):
        while True:
            with lock:
                if not requests:
                    return
                count = requests.pop()
            checked(timed(connection, latencies, "POST", path, {"records": [{"value": value}] * count})["offsets"])

    total_requests = len(requests)
    elapsed_s, latencies = run_connections(address, work)
    return {"records": records, "requests": total_requests, "elapsed_s": round(elapsed_s, 3),
            "records_per_s": round(records / elapsed_s), "requests_per_s": round(total_requests / elapsed_s),
            "mb_per_s": round(records * len(value) / 1e6 / elapsed_s, 2),
            "request_latency_p50_ms": percentile_ms(latencies, 0.50),
            "request_latency_p99_ms": percentile_ms(latencies, 0.99),
            "latency_p50_ms": percentile_ms(light_latencies, 0.50),
            "latency_p99_ms": percentile_ms(light_latencies, 0.99)}


def bench_queue(address: str, topic: str, messages: int, value: str) -> dict:
    requests = shares(messages, settings.BENCH_RECORDS_PER_REQUEST)
    lock = threading.Lock()

    def enqueue(connection, latencies):
        while True:
            with lock:
                if not requests:
                    return
                count = requests.pop()
            body = {"messages": [{"value": value, "priority": i % 10} for i in range(count)]}
            checked(timed(connection, latencies, "POST", f"/v1/queues/{topic}/messages", body)["messages"])

    enqueue_s, _ = run_connections(address, enqueue)
    acked = [0]

    def lease_ack(connection, latencies):
        while True:
            with lock:
                if acked[0] >= messages:
                    return
            leased = timed(connection, latencies, "POST", f"/v1/queues/{topic}/leases",
                           {"max": settings.BENCH_LEASE_MESSAGES, "visibility_ms": settings.BENCH_LEASE_VISIBILITY_MS,
                            "wait_ms": 100})["messages"]
            if not leased:
                continue
            checked(timed(connection, latencies, "POST", f"/v1/queues/{topic}/acks",
                          {"leases": [m["lease"] for m in leased]})["results"])
            with lock:
                acked[0] += len(leased)

    lease_ack_s, latencies = run_connections(address, lease_ack)
    if acked[0] != messages:
        raise InternalError(f"acked {acked[0]} of {messages} messages")
    return {"messages": messages, "enqueue_per_s": round(messages / enqueue_s),
            "lease_ack_per_s": round(messages / lease_ack_s),
            "lease_or_ack_request_p50_ms": percentile_ms(latencies, 0.50),
            "lease_or_ack_request_p99_ms": percentile_ms(latencies, 0.99)}


def durability_figures(admin: Admin) -> dict:
    stats = admin.broker_stats()
    if not stats:
        return {}
    return {"durability_window_p99_ms": max(s.durability_window_p99_ms for s in stats),
            "durability_window_max_ms": max(s.durability_window_max_ms for s in stats)}


def bench_http(bootstrap: str, args, progress) -> dict:
    """Both workloads through one gateway process; one result dict (see the module docstring)."""
    stamp = time.time_ns() // 1_000_000
    stream, queue = f"bench-http-{stamp}", f"bench-http-queue-{stamp}"
    value = "".join(random.Random(stamp).choices(string.ascii_letters, k=args.record_bytes))
    with Admin(bootstrap) as admin:
        admin.create_topic(stream, partitions=args.partitions, replication_factor=args.replication_factor)
        admin.create_topic(queue, partitions=args.partitions, replication_factor=args.replication_factor,
                           kind="queue", ordering="priority")
        brokers = len(admin.cluster_status().brokers)
        with gateway_process(bootstrap) as address:
            progress(f"gateway on {address}: producing {args.records} records over HTTP")
            produce = bench_produce(address, stream, args.records, value, args.http_light_requests)
            progress(f"enqueueing, leasing and acking {args.messages} messages over HTTP")
            queued = bench_queue(address, queue, args.messages, value)
        durability = durability_figures(admin)
    return {"bench": "http", "api": "HTTP/JSON through one raftbus http process (FastAPI on uvicorn, SDK inside)",
            "durability": f"acknowledged after majority commit of replication factor {args.replication_factor}",
            **produce, **{f"queue_{k}" if k == "messages" else k: v for k, v in queued.items()},
            **durability, "record_bytes": args.record_bytes, "brokers": brokers, "partitions": args.partitions,
            "replication_factor": args.replication_factor, "connections": settings.BENCH_CONNECTIONS,
            "records_per_request": settings.BENCH_RECORDS_PER_REQUEST,
            "lease_messages": settings.BENCH_LEASE_MESSAGES, "topic": stream, "queue_topic": queue}
