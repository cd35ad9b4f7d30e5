"""Chaos: a value changed on disk in one replica's queue store, and in one broker's metadata store, while the broker
was down. `raftbus topics verify` covers queue topics: it finds the changed replica (its store no longer adds up to
its kept checksum) and only that partition; `raftbus partitions rebuild` replaces it by a copy of the leader's, and
after more work every partition agrees again. `raftbus cluster verify` finds the changed metadata store, and agrees
once the broker's metadata store is whole again."""
from __future__ import annotations

import json
import subprocess
import sys

from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.context import METADATA_GROUP, partition_group_id
from raftbus.broker.queues.state import runs
from raftbus.broker.queues.state import tables as q
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.client import Admin, Producer, QueueConsumer
from tests.helpers import wait_until

TOPIC = "checked-jobs"
PARTITIONS = 2
STRAY_KEY = b"stray"  # a pair the metadata state machine never wrote


def raftbus_json(bootstrap: str, *argv: str) -> tuple[int, dict]:
    command = [sys.executable, "-c", "from raftbus.cli import main; raise SystemExit(main())",
               "--bootstrap", bootstrap, "--json", *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode in (0, 1) and done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def in_sync(bootstrap: str):
    with Admin(bootstrap) as admin:
        parts = admin.describe_topic(TOPIC).partitions
    return all(p.leader_id and len(p.isr) == 3 for p in parts) and parts


def damaged_stores(bootstrap: str, broker_id: int) -> tuple[str, ...]:
    with Admin(bootstrap) as admin:
        return next(s.damaged_stores for s in admin.broker_stats() if s.broker_id == broker_id)


def leader_of(bootstrap: str, partition: int) -> int | None:
    with Admin(bootstrap) as admin:
        return admin.describe_topic(TOPIC).partitions[partition].leader_id


def enqueue(bootstrap: str, prefix: str, count: int) -> None:
    with Producer(bootstrap, linger_ms=5) as producer:
        futures = [producer.send(TOPIC, f"{prefix}-{i}", partition=i % PARTITIONS, priority=i % 3)
                   for i in range(count)]
        producer.flush(60)
    assert all(f.result().message_id for f in futures)


def ack_some(bootstrap: str, count: int) -> None:
    acked = []
    with QueueConsumer(bootstrap, topics=[TOPIC]) as consumer:
        def more():
            for message in consumer.poll(0.5):
                acked.append(message.ack())
            return len(acked) >= count
        wait_until(more, 60, what=f"{count} messages leased and acked")
        for future in acked:
            future.result(30)


def change_a_stored_message(store_dir) -> None:
    """Flip the last byte of a stored record: in a message's row, or in a run (the enqueues above store their
    messages as runs, queue_runs_enabled)."""
    store = LmdbStore(str(store_dir), q.TABLES, 1 << 26)
    try:
        with store.write() as txn:
            table = next(t for t in (q.MESSAGES, runs.RUNS) if txn.first(t) is not None)
            key, value = txn.first(table)
            value = bytearray(value)
            value[-1] ^= 0x01
            txn.put(table, bytes(key), bytes(value))
    finally:
        store.close()


def set_stray_metadata_pair(store_dir, present: bool) -> None:
    store = LmdbStore(str(store_dir), MetadataStateMachine.TABLES, 1 << 26)
    try:
        with store.write() as txn:
            if present:
                txn.put("meta", STRAY_KEY, b"written behind the state machine's back")
            else:
                txn.delete("meta", STRAY_KEY)
    finally:
        store.close()


def assert_all_agree(bootstrap: str) -> None:
    status, report = raftbus_json(bootstrap, "topics", "verify", TOPIC)
    assert status == 0, report
    assert [p["partition"] for p in report["partitions"]] == list(range(PARTITIONS))
    for p in report["partitions"]:
        assert p["replicas_agree"] and len(p["replicas"]) == 3, p
        assert {r["store_consistent"] for r in p["replicas"]} == {True}, p


def test_queue_and_metadata_checksums_find_a_changed_replica_and_rebuild_repairs_it(cluster):
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, kind="queue")
    enqueue(cluster.bootstrap, "before", 600)
    ack_some(cluster.bootstrap, 100)
    parts = wait_until(lambda: in_sync(cluster.bootstrap), 60, what="queue partitions in sync")
    assert_all_agree(cluster.bootstrap)
    status, metadata = raftbus_json(cluster.bootstrap, "cluster", "verify")
    assert status == 0 and metadata["replicas_agree"] and len(metadata["replicas"]) == 3, metadata
    assert len({r["digest"] for r in metadata["replicas"]}) == 1, metadata

    victim = parts[0].replicas[0]
    broker = cluster.broker(victim)
    assert broker.terminate() == 0
    group_dir = next(d for d in (broker.data_dir / "partitions").iterdir() if d.name.endswith(".0"))
    change_a_stored_message(group_dir / "store")
    set_stray_metadata_pair(broker.data_dir / "metadata" / "store", present=True)
    broker.start()
    broker_log = broker.data_dir.parent / f"broker-{victim}.log"
    wait_until(lambda: broker_log.read_text().count("does not match its checksum") >= 2, 60,
               what="both changed stores reported when opened")
    wait_until(lambda: in_sync(cluster.bootstrap), 90, what="the restarted broker back in sync")
    with Admin(cluster.bootstrap) as admin:
        damaged_group = partition_group_id(admin.describe_topic(TOPIC).topic_id, 0)
    listed = wait_until(lambda: damaged_stores(cluster.bootstrap, victim), 30, what="BrokerStats damaged_stores")
    assert sorted(listed) == sorted([METADATA_GROUP, damaged_group]), listed
    wait_until(lambda: leader_of(cluster.bootstrap, 0) not in (None, victim), 60,
               what="the damaged replica hands its leadership away")

    status, report = raftbus_json(cluster.bootstrap, "topics", "verify", TOPIC)
    assert status == 1, report
    first, second = report["partitions"]
    assert not first["replicas_agree"] and second["replicas_agree"], report
    assert [r["broker_id"] for r in first["replicas"] if r["store_consistent"] is False] == [victim], first
    status, metadata = raftbus_json(cluster.bootstrap, "cluster", "verify")
    assert status == 1 and not metadata["replicas_agree"], metadata
    assert [r["broker_id"] for r in metadata["replicas"] if r["store_consistent"] is False] == [victim], metadata

    status, rebuilt = raftbus_json(cluster.bootstrap, "partitions", "rebuild", TOPIC, "0", "--broker", str(victim))
    assert status == 0 and rebuilt["broker_id"] == victim and rebuilt["source_broker_id"] != victim, rebuilt
    enqueue(cluster.bootstrap, "after", 200)
    ack_some(cluster.bootstrap, 100)
    wait_until(lambda: in_sync(cluster.bootstrap), 60, what="in sync after the rebuild")
    assert_all_agree(cluster.bootstrap)
    assert damaged_stores(cluster.bootstrap, victim) == (METADATA_GROUP,)

    assert broker.terminate() == 0
    set_stray_metadata_pair(broker.data_dir / "metadata" / "store", present=False)
    broker.start()
    wait_until(lambda: in_sync(cluster.bootstrap), 90, what="in sync after the metadata repair")
    status, metadata = raftbus_json(cluster.bootstrap, "cluster", "verify")
    assert status == 0 and metadata["replicas_agree"], metadata
