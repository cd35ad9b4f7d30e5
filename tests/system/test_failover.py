"""System tests: real broker processes, kill -9 under load, restarts on the same data dirs."""
from __future__ import annotations

import threading
import time

import pytest

from raftbus.client import Admin, Producer, Reader
from tests.helpers import wait_until
from tests.history import History
from tests.system.conftest import secure_only, wait_cluster_ready

pytestmark = pytest.mark.system

TOPIC = "orders"
PARTITIONS = 2
SENDS_MAX = 400_000
# a round of 200 sends starts at most every 50 ms: a steady load of up to 4,000 records/s under every failure,
# not a flood whose only effect is CPU taken from the brokers under test
ROUND_INTERVAL_S = 0.05


class ContinuousProducer:
    """Sends uniquely-valued records in bounded rounds from a thread until stopped; every outcome goes to History."""

    def __init__(self, bootstrap: str, history: History):
        self.history = history
        self.producer = Producer(bootstrap, linger_ms=2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        self.producer.close()

    def _run(self) -> None:
        sent = 0
        try:
            while not self._stop.is_set() and sent < SENDS_MAX:
                round_started = time.monotonic()
                futures = []
                for _ in range(200):
                    value = f"record-{sent}".encode()
                    future = self.producer.send(TOPIC, value, key=str(sent % 17))
                    self.history.track(value, future)
                    futures.append(future)
                    sent += 1
                for future in futures:
                    future.exception(timeout=150)
                self._stop.wait(ROUND_INTERVAL_S - (time.monotonic() - round_started))
        except BaseException as exc:  # reported by the test
            self.error = exc


def read_everything(bootstrap: str) -> list:
    with Reader(bootstrap) as reader:
        return list(reader.iter_topic(TOPIC, from_beginning=True, stop_at_end=True))


def partition_view(bootstrap: str, partition: int):
    with Admin(bootstrap) as admin:
        return admin.describe_topic(TOPIC).partitions[partition]


def all_in_sync(bootstrap: str, brokers: int):
    with Admin(bootstrap) as admin:
        parts = admin.describe_topic(TOPIC).partitions
    return all(p.leader_id and len(p.isr) == brokers for p in parts) and parts


@secure_only
def test_leader_kill_under_load_loses_nothing(cluster):
    """Killing -9 a partition leader under continuous produce, then restarting it on its data dir, loses no
    acknowledged record, duplicates none and keeps offsets gapless — before and after leadership moves again."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    history = History()
    with ContinuousProducer(cluster.bootstrap, history) as load:
        wait_until(lambda: history.acked_count >= 3000, 60, what="records acknowledged before the kill")
        victim = partition_view(cluster.bootstrap, 0).leader_id
        cluster.broker(victim).kill()
        acked_at_kill = history.acked_count
        wait_until(lambda: partition_view(cluster.bootstrap, 0).leader_id not in (None, 0, victim), 30,
                   what="a new leader for partition 0")
        wait_until(lambda: history.acked_count >= acked_at_kill + 3000, 60,
                   what="records acknowledged after the kill")
        cluster.broker(victim).start()
        wait_until(lambda: all_in_sync(cluster.bootstrap, 3), 60, what="restarted broker back in sync")
        wait_until(lambda: history.acked_count >= acked_at_kill + 6000, 60,
                   what="records acknowledged after the restart")
    assert load.error is None, load.error
    assert history.acked_count > 0 and len(history.failed) < history.sent
    history.check(read_everything(cluster.bootstrap), PARTITIONS)

    # Move leadership once more (graceful stop hands it off) and check the same history from the new leader.
    leader = partition_view(cluster.bootstrap, 0).leader_id
    assert cluster.broker(leader).terminate() == 0
    wait_until(lambda: partition_view(cluster.bootstrap, 0).leader_id not in (None, 0, leader), 30,
               what="leadership handed off")
    history.check(read_everything(cluster.bootstrap), PARTITIONS)
    cluster.broker(leader).start()
    wait_until(lambda: all_in_sync(cluster.bootstrap, 3), 60, what="stopped broker back in sync")


@secure_only
def test_full_cluster_restart_keeps_every_record(cluster):
    """After kill -9 of every broker and a restart on the same data dirs, every acknowledged record is still
    there at its offset and new records continue the offsets."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    history = History()
    with Producer(cluster.bootstrap, linger_ms=2) as producer:
        for i in range(5000):
            value = f"before-{i}".encode()
            history.track(value, producer.send(TOPIC, value, key=str(i)))
        producer.flush()
    assert history.acked_count == 5000
    for broker in cluster.brokers:
        broker.kill()
    for broker in cluster.brokers:
        broker.start()
    wait_cluster_ready(cluster)
    wait_until(lambda: all_in_sync(cluster.bootstrap, 3), 60, what="every partition led and in sync")
    history.check(read_everything(cluster.bootstrap), PARTITIONS)
    with Producer(cluster.bootstrap, linger_ms=2) as producer:
        for i in range(500):
            value = f"after-{i}".encode()
            history.track(value, producer.send(TOPIC, value, key=str(i)))
        producer.flush()
    assert history.acked_count == 5500
    records = read_everything(cluster.bootstrap)
    history.check(records, PARTITIONS)
    assert len(records) == 5500
