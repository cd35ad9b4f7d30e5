"""NATS failover: kill -9 of a stream's leader while publishing through a follower; how long until the next ack."""
from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass

import nats
import nats.errors

from raftbus.bench.runner import progress
from raftbus.bench.peers.nats_streams import FAILOVER_STREAM, FAILOVER_SUBJECT, SYSTEM, stream_state
from raftbus.bench.peers.servers import NatsCluster
from raftbus.client.errors import RequestTimedOut

FAILOVER_SEND_INTERVAL_MS = 2
FAILOVER_WARMUP_MS = 1_000
FAILOVER_TIMEOUT_MS = 30_000
FAILOVER_PUBLISH_TIMEOUT_MS = 5_000


def bench_failover(cluster: NatsCluster, args, common: dict) -> dict:
    leader, _ = asyncio.run(stream_state(cluster.urls, FAILOVER_STREAM))
    follower = next(name for name in cluster.servers if name != leader)
    progress(f"nats failover: publishing through {follower}, kill -9 of stream leader {leader} "
             f"after {FAILOVER_WARMUP_MS} ms")
    figures = asyncio.run(failover_figures(cluster, leader, follower, args.record_bytes))
    return {"bench": "failover", "system": SYSTEM, **figures, "killed": leader, "client_connected_to": follower,
            "send_interval_ms": FAILOVER_SEND_INTERVAL_MS, **common}


@dataclass(frozen=True)
class Ack:
    """One acknowledged publish: when it was sent and acknowledged (perf_counter s), its sequence and payload."""

    sent_s: float
    acked_s: float
    seq: int
    payload: bytes


async def failover_figures(cluster: NatsCluster, leader: str, follower: str, record_bytes: int) -> dict:
    """Publishes every FAILOVER_SEND_INTERVAL_MS; the leader is killed after FAILOVER_WARMUP_MS; failover_ms is
    the kill to the acknowledgement of the first publish sent after it. Every acknowledged publish is then read
    back by its sequence from the new leader: acked_lost counts those missing or different."""
    padding = os.urandom(max(0, record_bytes - 8))
    acks: list[Ack] = []
    nc = await nats.connect(servers=[cluster.url(follower)])
    try:
        js = nc.jetstream()

        async def send(index: int, sent_s: float) -> None:
            payload = index.to_bytes(8, "big") + padding
            try:
                ack = await js.publish(FAILOVER_SUBJECT, payload, timeout=FAILOVER_PUBLISH_TIMEOUT_MS / 1000)
                acks.append(Ack(sent_s, time.perf_counter(), ack.seq, payload))
            except (nats.errors.Error, asyncio.TimeoutError):
                pass

        kill_s = await _send_through_kill(cluster, leader, send, acks)
        new_leader, stored = await stream_state((cluster.url(follower),), FAILOVER_STREAM)
        lost = await _acked_lost(nc, acks)
    finally:
        await nc.close()
    after = [ack.acked_s for ack in acks if ack.sent_s >= kill_s]
    failover_ms = round((min(after) - kill_s) * 1000, 1) if after else None
    return {"failover_ms": failover_ms, "new_leader": new_leader, "acked": len(acks), "stored_after": stored,
            "acked_lost": lost}


async def _acked_lost(nc, acks: list[Ack]) -> int:
    jsm = nc.jsm()
    lost = 0
    for ack in acks:
        try:
            held = await jsm.get_msg(FAILOVER_STREAM, ack.seq)
        except nats.errors.Error:
            held = None
        lost += held is None or held.data != ack.payload
    return lost


async def _send_through_kill(cluster: NatsCluster, leader: str, send, acks: list[Ack]) -> float:
    """Start a send every interval; kill the leader after the warm-up; stop at the first ack of a send made after
    the kill (or FAILOVER_TIMEOUT_MS) and wait for the sends still out. Returns the kill time."""
    tasks: set[asyncio.Task] = set()
    started_s = time.perf_counter()
    kill_s = None
    for i in itertools.count():
        now_s = time.perf_counter()
        if kill_s is None and now_s - started_s >= FAILOVER_WARMUP_MS / 1000:
            cluster.kill(leader)
            kill_s = time.perf_counter()
        if kill_s is not None and (any(ack.sent_s >= kill_s for ack in acks[-50:])
                                   or now_s - kill_s > FAILOVER_TIMEOUT_MS / 1000):
            break
        task = asyncio.create_task(send(i, now_s))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        await asyncio.sleep(max(0.0, started_s + (i + 1) * FAILOVER_SEND_INTERVAL_MS / 1000 - time.perf_counter()))
    if tasks:
        await asyncio.wait(tasks, timeout=(FAILOVER_PUBLISH_TIMEOUT_MS + 1_000) / 1000)
    if not acks:
        raise RequestTimedOut("nats failover: no publish was ever acknowledged")
    return kill_s
