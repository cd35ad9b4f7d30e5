"""System test: `raftbus topics verify` finds replicas in agreement after writes, finds the one replica whose
stored batch was changed on disk (bit rot) while its broker was down, and `raftbus partitions rebuild` repairs it
from the leader."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from raftbus.broker.context import partition_group_id
from raftbus.broker.log.state import BATCHES, PartitionStateMachine
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.client import Admin, Producer
from tests.helpers import wait_until
from tests.system.conftest import secure_only

pytestmark = pytest.mark.system

TOPIC = "verified"
PARTITIONS = 2


def raftbus_json(bootstrap: str, *argv: str) -> tuple[int, dict]:
    command = [sys.executable, "-c", "from raftbus.cli import main; raise SystemExit(main())",
               "--bootstrap", bootstrap, "--json", *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1) and done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def verify(bootstrap: str) -> tuple[int, dict]:
    return raftbus_json(bootstrap, "topics", "verify", TOPIC)


def damaged_stores(bootstrap: str, broker_id: int) -> tuple[str, ...]:
    with Admin(bootstrap) as admin:
        return next(s.damaged_stores for s in admin.broker_stats() if s.broker_id == broker_id)


def in_sync(bootstrap: str):
    with Admin(bootstrap) as admin:
        parts = admin.describe_topic(TOPIC).partitions
    return all(p.leader_id and len(p.isr) == 3 for p in parts) and parts


def flip_a_byte_of_the_first_batch(store_dir) -> None:
    store = LmdbStore(str(store_dir), PartitionStateMachine.TABLES, 1 << 26)
    try:
        with store.write() as txn:
            key, value = next(iter(txn.items(BATCHES)))
            key, value = bytes(key), bytearray(value)
            value[-1] ^= 0x01
            txn.put(BATCHES, key, bytes(value))
    finally:
        store.close()


@secure_only
def test_verify_agrees_finds_a_changed_replica_and_rebuild_repairs_it(cluster):
    """Every partition's replicas agree after 1,000 records; after a byte of one replica's stored batch is
    flipped while its broker is stopped, the broker reports it when it opens the store, that partition no longer
    agrees, the changed replica says so, the other partition still agrees, and the command exits 1; the changed
    replica leads again (it is the preferred one), and rebuilding it moves leadership away, copies the new
    leader's store, and after more writes every partition agrees again."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    with Producer(cluster.bootstrap, linger_ms=2) as producer:
        for i in range(1000):
            producer.send(TOPIC, f"v{i}".encode(), key=str(i))
        producer.flush(60)
    parts = wait_until(lambda: in_sync(cluster.bootstrap), 60, what="partitions in sync")
    status, report = verify(cluster.bootstrap)
    assert status == 0, report
    assert [p["partition"] for p in report["partitions"]] == list(range(PARTITIONS))
    for p in report["partitions"]:
        assert p["replicas_agree"] and len(p["replicas"]) == 3
        assert {r["store_consistent"] for r in p["replicas"]} == {True}
        assert len({r["digest"] for r in p["replicas"]}) == 1 and p["replicas"][0]["high_watermark"] > 0

    victim = parts[0].replicas[0]  # the preferred replica: it would lead again once back, were its store whole
    broker = cluster.broker(victim)
    assert broker.terminate() == 0
    stores = [d / "store" for d in (broker.data_dir / "partitions").iterdir()]
    group_dir = next(d for d in stores if d.parent.name.endswith(".0"))
    flip_a_byte_of_the_first_batch(group_dir)
    broker.start()
    broker_log = broker.data_dir.parent / f"broker-{victim}.log"
    wait_until(lambda: "does not match its checksum" in broker_log.read_text(), 30,
               what="the changed store reported when opened")
    wait_until(lambda: in_sync(cluster.bootstrap), 60, what="the stopped broker back in sync")
    with Admin(cluster.bootstrap) as admin:
        group_id = partition_group_id(admin.describe_topic(TOPIC).topic_id, 0)
    wait_until(lambda: group_id in damaged_stores(cluster.bootstrap, victim), 30,
               what="the changed replica listed in its broker's damaged_stores")
    wait_until(lambda: in_sync(cluster.bootstrap)[0].leader_id not in (None, victim), 60,
               what="another replica leading partition 0")
    status, report = verify(cluster.bootstrap)
    assert status == 1, report
    first, second = report["partitions"]
    assert not first["replicas_agree"] and second["replicas_agree"], report
    changed = [r["broker_id"] for r in first["replicas"] if r["store_consistent"] is False]
    assert changed == [victim], first

    status, rebuilt = raftbus_json(cluster.bootstrap, "partitions", "rebuild", TOPIC, "0", "--broker", str(victim))
    assert status == 0 and rebuilt["broker_id"] == victim and rebuilt["source_broker_id"] != victim, rebuilt
    with Producer(cluster.bootstrap, linger_ms=2) as producer:
        for i in range(200):
            producer.send(TOPIC, f"after-{i}".encode(), partition=0)
        producer.flush(60)
    status, report = verify(cluster.bootstrap)
    assert status == 0, report
    assert all(r["store_consistent"] for p in report["partitions"] for r in p["replicas"]), report
    assert group_id not in damaged_stores(cluster.bootstrap, victim)
    wait_until(lambda: in_sync(cluster.bootstrap)[0].leader_id == victim, 60,
               what="the rebuilt replica leading again (preferred leader)")
