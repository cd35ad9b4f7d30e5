"""System test: an idempotent producer's healthy batches all succeed across a kill -9 of a partition leader.

The leader dies while the first batches of every partition are still in flight, so the new leader sees this
producer for the first time on a retry, possibly a later batch before an earlier one.
"""
from __future__ import annotations

import pytest

from raftbus.client import Admin, Producer, Reader
from tests.helpers import wait_until
from tests.history import History

pytestmark = pytest.mark.system

PARTITIONS = 6
RECORDS = 30_000
# sends before the kill, one round each; the two clusters (plaintext, secure) share the kill points out
KILL_AT = {"plaintext": (10_000, 2_000), "secure": (100, 10_000)}


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    with Admin(bootstrap) as admin:
        parts = admin.describe_topic(topic).partitions
    return {p.partition: p.leader_id for p in parts if p.leader_id}


def in_sync(bootstrap: str, topic: str) -> bool:
    with Admin(bootstrap) as admin:
        parts = admin.describe_topic(topic).partitions
    return all(p.leader_id and len(p.isr) == 3 for p in parts)


def produce_through_a_kill(cluster, topic: str, kill_at: int, history: History, failures: list) -> int:
    """Send RECORDS keyed records; kill -9 the leader of partition 0 after `kill_at` sends; return the victim."""
    victim = leaders(cluster.bootstrap, topic)[0]
    with Producer(cluster.bootstrap, delivery_timeout_ms=60_000) as producer:
        for i in range(RECORDS):
            value = f"{topic}-{i}".encode()
            future = producer.send(topic, value, key=str(i % 997))
            history.track(value, future)
            future.add_done_callback(lambda f: f.exception() and failures.append(f.exception()))
            if i == kill_at:
                cluster.broker(victim).kill()
        producer.flush(90)
    return victim


def test_a_leader_killed_mid_produce_fails_no_healthy_batch(cluster, request):
    """In every round, killing the leader some sends (10,000 and fewer) into a 30,000-record keyed produce fails
    no record, loses none, duplicates none and keeps offsets gapless."""
    for round_, kill_at in enumerate(KILL_AT[request.node.callspec.params["cluster"]]):
        topic = f"keyed-{round_}"
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
        wait_until(lambda: in_sync(cluster.bootstrap, topic), 60, what=f"{topic} led and in sync")
        history, failures = History(), []
        victim = produce_through_a_kill(cluster, topic, kill_at, history, failures)
        assert not failures, f"round {round_}: {len(failures)} records failed, e.g. {failures[0]!r}"
        assert history.acked_count == RECORDS
        with Reader(cluster.bootstrap) as reader:
            records = list(reader.iter_topic(topic, from_beginning=True, stop_at_end=True))
        history.check(records, PARTITIONS)
        assert len(records) == RECORDS
        cluster.broker(victim).start()
        wait_until(lambda: in_sync(cluster.bootstrap, topic), 60, what=f"broker {victim} back in sync")
