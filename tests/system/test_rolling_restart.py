"""System test: the documented rolling restart (for each broker: drain, SIGTERM, start on the same data dir, wait
until in sync, undrain) under a produce and a consumer-group load fails no write, loses no acknowledged record,
and the consumer group reads every acknowledged record, each partition in increasing offsets."""
from __future__ import annotations

import threading

import pytest

from raftbus.client import Admin, Consumer
from tests.helpers import wait_until
from tests.history import History
from tests.system.conftest import secure_only, wait_cluster_ready
from tests.system.test_failover import TOPIC, ContinuousProducer, all_in_sync, read_everything

pytestmark = pytest.mark.system

PARTITIONS = 2
GROUP = "restart-readers"


class GroupReader:
    """One consumer-group member in a thread: records every value it reads and each committed position."""

    def __init__(self, bootstrap: str):
        self.consumer = Consumer(bootstrap, group=GROUP, topics=[TOPIC], auto_offset_reset="earliest")
        self.values: set[bytes] = set()
        self.backwards: list[tuple] = []
        self._positions: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for record in self.consumer.poll(timeout_s=0.5, max_records=1000):
                    self.values.add(record.value)
                    last = self._positions.get(record.partition, -1)
                    if record.offset <= last:
                        self.backwards.append((record.partition, last, record.offset))
                    self._positions[record.partition] = record.offset
                self.consumer.commit()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def close(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self.consumer.close()


@secure_only
def test_rolling_restart_under_load_fails_no_write_and_loses_nothing(cluster):
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    history = History()
    reader = GroupReader(cluster.bootstrap)
    try:
        with ContinuousProducer(cluster.bootstrap, history) as load:
            wait_until(lambda: history.acked_count >= 2000, 60, what="records acknowledged before the restarts")
            for broker in cluster.brokers:
                with Admin(cluster.bootstrap) as admin:
                    drained = admin.drain_broker(broker.node_id, timeout_s=60)
                    assert drained.state == "draining" and admin.leaderships_of(broker.node_id) == 0
                acked = history.acked_count
                assert broker.terminate() == 0
                wait_until(lambda: history.acked_count >= acked + 1000, 60, what="writes while a broker is down")
                broker.start()
                wait_cluster_ready(cluster)
                wait_until(lambda: all_in_sync(cluster.bootstrap, 3), 60, what="the restarted broker in sync")
                with Admin(cluster.bootstrap) as admin:
                    assert admin.undrain_broker(broker.node_id).state == "active"
            acked = history.acked_count
            wait_until(lambda: history.acked_count >= acked + 1000, 60, what="writes after the last restart")
        assert load.error is None, load.error
        assert not history.failed, f"{len(history.failed)} writes failed during the rolling restart"
        history.check(read_everything(cluster.bootstrap), PARTITIONS)
        acked_values = set(history.acked)
        wait_until(lambda: acked_values <= reader.values, 60, what="the group read every acknowledged record")
    finally:
        reader.close()
    assert reader.error is None, reader.error
    assert reader.backwards == [], f"offsets moved backwards within a member: {reader.backwards[:5]}"
