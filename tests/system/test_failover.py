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
    # The restarted broker may be taking back a leadership it prefers: wait for a leader to be known.
    leader = wait_until(lambda: partition_view(cluster.bootstrap, 0).leader_id, 30, what="a leader for partition 0")
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


READ_TOPIC = "read-across-kill"
READ_PARTITIONS = 6
READ_RECORDS = 12_000


@secure_only
def test_a_reader_of_many_partitions_reads_every_record_once_across_a_leader_kill(cluster):
    """Goal: Reader.iter_topic over 6 partitions (FetchMany calls to each leader) keeps reading while the broker
    leading some of them is killed -9 mid-read: the calls to it fail, the partitions move to new leaders and the
    read goes on there, and every record comes once, in offset order per partition, up to the end it started
    with."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(READ_TOPIC, partitions=READ_PARTITIONS, replication_factor=3)
    with Producer(cluster.bootstrap, linger_ms=5) as producer:
        futures = [producer.send(READ_TOPIC, f"r-{i}".encode(), partition=i % READ_PARTITIONS)
                   for i in range(READ_RECORDS)]
        producer.flush()
    assert all(f.exception(timeout=60) is None for f in futures)
    with Admin(cluster.bootstrap) as admin:
        leaders = {p.partition: p.leader_id for p in admin.describe_topic(READ_TOPIC).partitions}
    victim = leaders[0]
    read: dict[int, list[int]] = {p: [] for p in range(READ_PARTITIONS)}
    values = set()
    with Reader(cluster.bootstrap, fetch_bytes_max=4096) as reader:  # many small answers: the kill lands mid-read
        for count, record in enumerate(reader.iter_topic(READ_TOPIC, from_beginning=True, stop_at_end=True)):
            if count == 1_000:
                cluster.broker(victim).kill()
                left_at_kill = READ_RECORDS // READ_PARTITIONS - len(read[0])
            read[record.partition].append(record.offset)
            values.add(record.value)
    assert left_at_kill > 0  # partition 0 was still being read from the killed leader
    assert sum(map(len, read.values())) == READ_RECORDS and len(values) == READ_RECORDS
    for partition, offsets in read.items():
        assert offsets == list(range(READ_RECORDS // READ_PARTITIONS)), partition
    moved = [p for p, leader in leaders.items() if leader == victim]
    with Admin(cluster.bootstrap) as admin:
        now = {p.partition: p.leader_id for p in admin.describe_topic(READ_TOPIC).partitions}
    assert all(now[p] != victim for p in moved)
    cluster.broker(victim).start()
