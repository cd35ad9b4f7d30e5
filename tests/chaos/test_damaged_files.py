"""Chaos: damaged files on one broker. A torn journal tail is cut and the replica catches up; a damaged store page
and a damaged record the journal had fsynced stop only their own group (flagged in BrokerStats and the health
service) while the broker and the cluster keep serving; removing a stopped replica's directory rebuilds it from
the leader. Nothing acknowledged is lost or duplicated, and the replicas end byte-identical."""
from __future__ import annotations

import shutil
import struct

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from raftbus.broker.raft.journal import MAGIC, RECORD, read_synced_index
from raftbus.client import Admin, Producer
from tests.chaos.harness import replicas_identical
from tests.helpers import wait_until
from tests.history import History
from tests.system.test_failover import TOPIC, all_in_sync, read_everything

PARTITIONS = 3
PAGE_BYTES = 4096
_META_ROOT_OFFSET = 128   # md_root of the main database inside an LMDB meta page
_META_TXNID_OFFSET = 144  # mm_txnid


def send(producer: Producer, history: History, prefix: str, count: int) -> None:
    for i in range(count):
        value = f"{prefix}-{i}".encode()
        history.track(value, producer.send(TOPIC, value, key=str(i)))
    producer.flush()


def tear_journal_tail(journal) -> None:
    """Half of a record appended after the last one: what a crash in the middle of a write leaves."""
    with open(journal, "ab") as f:
        f.write(RECORD.pack(1000, 10**9, 1, 0) + b"torn")


def damage_fsynced_record(journal) -> None:
    """Flip a byte inside the first record's command: a record the group commit had fsynced long ago."""
    with open(journal, "r+b") as f:
        offset = len(MAGIC) + RECORD.size
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def damage_store_root_page(data_mdb) -> None:
    """Zero the page holding the root of the store's main database (found through the newer meta page)."""
    with open(data_mdb, "r+b") as f:
        metas = []
        for page in (0, 1):
            f.seek(page * PAGE_BYTES + _META_ROOT_OFFSET)
            (root,) = struct.unpack("<Q", f.read(8))
            f.seek(page * PAGE_BYTES + _META_TXNID_OFFSET)
            (txnid,) = struct.unpack("<Q", f.read(8))
            metas.append((txnid, root))
        root = max(metas)[1]
        assert root > 1, metas
        f.seek(root * PAGE_BYTES)
        f.write(bytes(PAGE_BYTES))


def health_of(address: str, service: str):
    with grpc.insecure_channel(address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


def stopped_groups(bootstrap: str, broker_id: int):
    with Admin(bootstrap) as admin:
        stats = [s for s in admin.broker_stats() if s.broker_id == broker_id]
    return stats and sorted(stats[0].stopped_groups)


def test_damaged_journal_and_store_stop_only_their_group_and_rebuild_from_the_leader(cluster):
    with Admin(cluster.bootstrap) as admin:
        topic_id = admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3).topic_id
    groups = [f"p{topic_id}.{p}" for p in range(PARTITIONS)]
    history = History()
    with Producer(cluster.bootstrap, linger_ms=2) as producer:
        send(producer, history, "before", 3000)
    wait_until(lambda: all_in_sync(cluster.bootstrap, 3), 60, what="in sync")
    data_dirs = [b.data_dir for b in cluster.brokers]
    wait_until(lambda: replicas_identical(data_dirs), 30, what="identical before the damage")

    victim = cluster.broker(3)
    partitions = victim.data_dir / "partitions"
    damaged_journal = partitions / groups[2] / "raft" / "raft.journal"
    wait_until(lambda: read_synced_index(str(damaged_journal)) > 0, 30, what="the first record fsynced")
    victim.kill()
    tear_journal_tail(partitions / groups[0] / "raft" / "raft.journal")
    damage_store_root_page(partitions / groups[1] / "store" / "data.mdb")
    damage_fsynced_record(damaged_journal)
    victim.start()

    wait_until(lambda: stopped_groups(cluster.bootstrap, 3) == sorted(groups[1:]), 60,
               what="the two damaged groups flagged stopped, the torn one not")
    assert health_of(victim.address, groups[1]) == health_pb2.HealthCheckResponse.NOT_SERVING
    assert health_of(victim.address, groups[2]) == health_pb2.HealthCheckResponse.NOT_SERVING
    assert health_of(victim.address, "") == health_pb2.HealthCheckResponse.SERVING
    with Producer(cluster.bootstrap, linger_ms=2) as producer:
        send(producer, history, "while-stopped", 1000)
    assert not history.failed, (len(history.failed), history.errors)
    history.check(read_everything(cluster.bootstrap), PARTITIONS)

    victim.terminate()
    for group_id in groups[1:]:
        shutil.rmtree(partitions / group_id)
    victim.start()
    wait_until(lambda: stopped_groups(cluster.bootstrap, 3) == [], 60, what="no stopped group after the rebuild")
    wait_until(lambda: all_in_sync(cluster.bootstrap, 3), 90, what="rebuilt replicas in sync")
    with Producer(cluster.bootstrap, linger_ms=2) as producer:
        send(producer, history, "after", 500)
    assert not history.failed, (len(history.failed), history.errors)
    history.check(read_everything(cluster.bootstrap), PARTITIONS)
    wait_until(lambda: replicas_identical(data_dirs), 60, what="byte-identical replicas after the rebuild")
