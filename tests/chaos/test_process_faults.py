"""Chaos: kill -9, SIGSTOP/SIGCONT of a leader and restarts under continuous produce and a committing consumer
group lose no acknowledged record, duplicate none, keep offsets gapless, leave the replicas byte-identical and
never move a committed group offset backwards."""
from __future__ import annotations

import os
import signal

from raftbus.client import Admin
from tests.chaos.harness import OffsetWatch, replicas_identical
from tests.helpers import wait_until
from tests.history import History
from tests.system.test_failover import PARTITIONS, TOPIC, ContinuousProducer, all_in_sync, partition_view, read_everything


def acked_more(history: History, count: int, what: str, timeout_s: float = 60) -> None:
    target = history.acked_count + count
    wait_until(lambda: history.acked_count >= target, timeout_s, what=what)


def test_kills_pauses_and_restarts_under_load(cluster):
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    history = History()
    with ContinuousProducer(cluster.bootstrap, history) as load, OffsetWatch(cluster.bootstrap, TOPIC) as offsets:
        acked_more(history, 2000, "records before the faults")

        victim = partition_view(cluster.bootstrap, 0).leader_id
        cluster.broker(victim).kill()
        acked_more(history, 2000, "records with a leader killed")
        cluster.broker(victim).start()

        paused = partition_view(cluster.bootstrap, 1).leader_id
        os.kill(cluster.broker(paused).proc.pid, signal.SIGSTOP)
        try:
            # Batches already sent to the paused leader wait out the client's request timeout (30 s) before they
            # are retried at the new leader, and the producer's rounds wait for them: allow for that.
            acked_more(history, 1000, "records with a leader paused", timeout_s=120)
        finally:
            os.kill(cluster.broker(paused).proc.pid, signal.SIGCONT)
        acked_more(history, 1000, "records after the paused leader resumed")

        for broker in cluster.brokers:  # every broker killed and restarted once, one at a time
            broker.kill()
            acked_more(history, 1000, f"records with broker {broker.node_id} down")
            broker.start()
            wait_until(lambda: all_in_sync(cluster.bootstrap, 3), 60, what="back in sync")
        acked_more(history, 1000, "records after the last restart")
        wait_until(lambda: offsets.consumed > 0, 30, what="the group consumed something")
    assert load.error is None, load.error
    history.check(read_everything(cluster.bootstrap), PARTITIONS)
    offsets.check()
    wait_until(lambda: all_in_sync(cluster.bootstrap, 3), 60, what="every replica in sync")
    wait_until(lambda: replicas_identical([b.data_dir for b in cluster.brokers]), 30,
               what="byte-identical replicas")
