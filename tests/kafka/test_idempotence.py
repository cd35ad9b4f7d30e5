"""Goal: confluent-kafka's idempotent producer (enable.idempotence=true, acks=all) loses nothing, duplicates
nothing and keeps each key's order while the leader of the partitions it writes is killed with kill -9."""
from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tests.helpers import wait_until
from tests.kafka.conftest import consume_all, create_topic, kafka_cluster

pytestmark = pytest.mark.kafka
KEYS, RECORDS = 12, 6000


def test_idempotent_producer_across_a_leader_kill(tmp_path):
    """Goal: every acknowledged record is read back exactly once, in per-key order, after kill -9 of the broker
    leading partition 0 in the middle of the run (and every record is acknowledged: the producer retries)."""
    with kafka_cluster(tmp_path) as cluster:
        create_topic(cluster, "idem", partitions=3)
        admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
        victim = admin.list_topics("idem", timeout=10).topics["idem"].partitions[0].leader
        acked, failed = [], []

        def report(err, msg):
            (failed if err is not None else acked).append((err, msg))

        producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "enable.idempotence": True,
                             "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000,
                             "retry.backoff.ms": 50})
        killed = threading.Event()
        sequences = defaultdict(int)
        started = time.monotonic()
        for i in range(RECORDS):
            key = i % KEYS
            producer.produce("idem", key=b"key-%d" % key, value=b"%d:%d" % (key, sequences[key]), on_delivery=report)
            sequences[key] += 1
            producer.poll(0)
            if i == RECORDS // 3:
                cluster.broker(victim).kill()
                killed.set()
            if i % 500 == 0:
                time.sleep(0.05)  # spread the run over the kill and the election after it
        assert producer.flush(90) == 0
        assert killed.is_set() and failed == [], failed[:3]
        assert len(acked) == RECORDS
        wait_until(lambda: all(p.leader not in (-1, victim) for p in admin.list_topics(
            "idem", timeout=5).topics["idem"].partitions.values()), 30, what="new leaders")
        got = consume_all(cluster.kafka_bootstrap, "idem", [0, 1, 2], RECORDS, timeout_s=60)
        values = [m.value() for m in got]
        assert len(values) == len(set(values)) == RECORDS  # nothing lost, nothing twice
        by_key = defaultdict(list)
        for message in sorted(got, key=lambda m: (m.partition(), m.offset())):
            key, seq = message.value().split(b":")
            by_key[int(key)].append(int(seq))
        assert {k: seqs for k, seqs in by_key.items()} == {k: list(range(sequences[k])) for k in range(KEYS)}
        assert time.monotonic() - started < 120
