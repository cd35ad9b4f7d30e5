"""System test: `raftbus backup create` (full, then incremental) of a running cluster under writes, `backup verify`
catching a damaged file, and `backup restore` into a second cluster putting every record at its partition and
offset (a retention-trimmed partition included), the groups' committed offsets, and the queue messages; and an
encrypted backup (`--key-file`): owner-only, no plaintext, refused with a missing or wrong key or a tampered file."""
from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys

import pytest

from raftbus.client import Admin, Consumer, Producer, Queues, Reader
from tests.helpers import wait_until
from tests.system.conftest import running_cluster

pytestmark = pytest.mark.system

# retention checks every 200 ms so a size-limited topic trims during the test
ENV = {"RAFTBUS_RETENTION_CHECK_INTERVAL_MS": "200"}


def raftbus_cli(bootstrap: str, *argv: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", "from raftbus.cli import main; raise SystemExit(main())",
               "--bootstrap", bootstrap, *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def records_of(bootstrap: str, topic: str) -> list[tuple]:
    with Reader(bootstrap) as reader:
        return sorted((r.partition, r.offset, r.key, r.value, r.headers, r.timestamp_ms)
                      for r in reader.iter_topic(topic, from_beginning=True, stop_at_end=True))


def fill(bootstrap: str, topic: str, first: int, count: int) -> None:
    with Producer(bootstrap, linger_ms=1) as producer:
        for i in range(first, first + count):
            producer.send(topic, f"value-{i}", key=f"k{i % 5}", headers={"n": str(i)})
        producer.flush()


def test_backup_full_and_incremental_verify_and_restore_into_another_cluster(tmp_path):
    """Goal: a full and an incremental backup taken under writes verify, a damaged file is named, and a restore into
    another cluster puts back every record, offset and queue message."""
    backup_dir = tmp_path / "backups"
    with running_cluster(tmp_path / "source", env=ENV) as source:
        with Admin(source.bootstrap) as admin:
            admin.create_topic("orders", partitions=2, replication_factor=3)
            admin.create_topic("trimmed", partitions=1, replication_factor=3, retention_bytes=4_000)
            admin.create_topic("jobs", partitions=2, replication_factor=3, kind="queue")
        fill(source.bootstrap, "orders", 0, 300)
        with Producer(source.bootstrap, linger_ms=0) as producer:  # one batch per send: retention trims batches
            for i in range(200):
                producer.send("trimmed", b"x" * 100, key=str(i)).result()
            for i in range(6):
                producer.send("jobs", f"job-{i}", priority=i % 3, group=f"g{i % 2}",
                              idempotency_key=f"key-{i}").result()
            later = producer.send("jobs", b"now").result().timestamp_ms + 3_600_000
            producer.send("jobs", b"later", deliver_at_ms=later).result()  # delayed an hour
        with Admin(source.bootstrap) as admin:
            wait_until(lambda: admin.describe_topic("trimmed").partitions[0].log_start_offset > 0, 30,
                       what="retention trimmed the size-limited topic")
        with Consumer(source.bootstrap, group="billing", topics=["orders"], auto_offset_reset="earliest") as consumer:
            read = []
            wait_until(lambda: read.extend(consumer.poll(timeout_s=0.5, max_records=50)) or len(read) >= 100, 30,
                       what="the group read 100 records")
            consumer.commit()

        full = raftbus_cli(source.bootstrap, "backup", "create", str(backup_dir), "--json")
        assert full.returncode == 0, full.stderr
        assert json.loads(full.stdout)["kind"] == "full"
        fill(source.bootstrap, "orders", 300, 150)
        incremental = raftbus_cli(source.bootstrap, "backup", "create", str(backup_dir), "--incremental", "--json")
        assert incremental.returncode == 0, incremental.stderr
        assert json.loads(incremental.stdout)["records"] >= 150
        again_full = raftbus_cli(source.bootstrap, "backup", "create", str(backup_dir))
        assert again_full.returncode == 1 and "--incremental" in again_full.stderr

        expected_orders = records_of(source.bootstrap, "orders")
        expected_trimmed = records_of(source.bootstrap, "trimmed")
        with Admin(source.bootstrap) as admin:
            expected_offsets = {p.partition: p.committed_offset for p in admin.describe_group("billing").partitions}
        with Queues(source.bootstrap) as queues:
            expected_jobs = sorted((m.value, m.priority, m.group, m.idempotency_key, m.state)
                                   for p in (0, 1) for m in queues.iter_messages("jobs", p))
    assert expected_trimmed[0][1] > 0 and len(expected_jobs) == 8

    verified = raftbus_cli("127.0.0.1:1", "backup", "verify", str(backup_dir), "--json")
    assert verified.returncode == 0 and json.loads(verified.stdout) == {"ok": True, "problems": []}
    damaged = tmp_path / "damaged"
    shutil.copytree(backup_dir, damaged)
    batches = damaged / "0001-full" / "streams" / "orders" / "0.batches"
    raw = bytearray(batches.read_bytes())
    raw[-1] ^= 0xFF
    batches.write_bytes(bytes(raw))
    broken = raftbus_cli("127.0.0.1:1", "backup", "verify", str(damaged), "--json")
    assert broken.returncode == 1 and "SHA-256" in json.loads(broken.stdout)["problems"][0]

    with running_cluster(tmp_path / "target") as target:
        restored = raftbus_cli(target.bootstrap, "backup", "restore", str(backup_dir), "--json")
        assert restored.returncode == 0, restored.stderr
        assert records_of(target.bootstrap, "orders") == expected_orders
        assert records_of(target.bootstrap, "trimmed") == expected_trimmed
        with Admin(target.bootstrap) as admin:
            assert admin.describe_topic("trimmed").retention_bytes == 4_000
        with Consumer(target.bootstrap, group="billing", topics=["orders"], auto_offset_reset="latest") as consumer:
            first = {}
            wait_until(lambda: [first.setdefault(r.partition, r.offset)
                                for r in consumer.poll(timeout_s=0.5, max_records=500)] is not None
                       and len(first) == 2, 30, what="the restored group reading both partitions")
        assert first == expected_offsets  # the group resumes where it had committed, not at "latest"
        with Queues(target.bootstrap) as queues:
            jobs = sorted((m.value, m.priority, m.group, m.idempotency_key, m.state)
                          for p in (0, 1) for m in queues.iter_messages("jobs", p))
        assert jobs == expected_jobs
        again = raftbus_cli(target.bootstrap, "backup", "restore", str(backup_dir))
        assert again.returncode == 1 and "TOPIC_EXISTS" in again.stderr


def modes_under(root) -> set[tuple[str, int]]:
    return {("dir" if p.is_dir() else "file", stat.S_IMODE(p.lstat().st_mode)) for p in [root, *root.rglob("*")]}


def test_an_encrypted_backup_is_owner_only_and_restores_with_its_key_only(tmp_path):
    """Goal: `backup create --key-file` writes nothing readable by others and no plaintext; verify and restore
    refuse a missing or wrong key (BACKUP_KEY_MISMATCH) and a tampered file (CORRUPT_BACKUP); with the key, the
    records and the group's offsets come back (here into the same cluster, after the topic was deleted)."""
    key, other, backup_dir = tmp_path / "backup.key", tmp_path / "other.key", tmp_path / "encrypted"
    with running_cluster(tmp_path / "cluster") as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic("sealed-orders", partitions=2, replication_factor=3)
        fill(cluster.bootstrap, "sealed-orders", 0, 200)
        with Consumer(cluster.bootstrap, group="sealed-billing", topics=["sealed-orders"],
                      auto_offset_reset="earliest") as consumer:
            read = []
            wait_until(lambda: read.extend(consumer.poll(timeout_s=0.5, max_records=50)) or len(read) >= 50, 30,
                       what="the group read 50 records")
            consumer.commit()
        with Admin(cluster.bootstrap) as admin:
            committed = {p.partition: p.committed_offset for p in admin.describe_group("sealed-billing").partitions}
        expected = records_of(cluster.bootstrap, "sealed-orders")
        for path in (key, other):
            made = raftbus_cli(cluster.bootstrap, "backup", "create-key", str(path), "--json")
            assert made.returncode == 0 and len(json.loads(made.stdout)["key_id"]) == 16, made.stderr
        assert raftbus_cli(cluster.bootstrap, "backup", "create-key", str(key)).returncode == 1  # never overwritten
        created = raftbus_cli(cluster.bootstrap, "backup", "create", str(backup_dir), "--key-file", str(key), "--json")
        assert created.returncode == 0 and json.loads(created.stdout)["records"] == 200, created.stderr
        assert modes_under(backup_dir) <= {("dir", 0o700), ("file", 0o600)}
        sealed = list(backup_dir.glob("0001-full/streams/sealed-orders/*.batches"))
        assert sealed and all(b"value-1" not in p.read_bytes() for p in sealed)

        assert json.loads(raftbus_cli("127.0.0.1:1", "backup", "verify", str(backup_dir), "--key-file", str(key),
                                      "--json").stdout) == {"ok": True, "problems": []}
        for argv in ((), ("--key-file", str(other))):
            refused = raftbus_cli("127.0.0.1:1", "backup", "verify", str(backup_dir), *argv)
            assert refused.returncode == 1 and "BACKUP_KEY_MISMATCH" in refused.stderr, refused.stderr
            refused = raftbus_cli(cluster.bootstrap, "backup", "restore", str(backup_dir), *argv)
            assert refused.returncode == 1 and "BACKUP_KEY_MISMATCH" in refused.stderr, refused.stderr
        tampered = tmp_path / "tampered"
        shutil.copytree(backup_dir, tampered)
        raw = bytearray(sealed[0].read_bytes())
        raw[len(raw) // 2] ^= 0x01
        (tampered / sealed[0].relative_to(backup_dir)).write_bytes(bytes(raw))
        broken = raftbus_cli("127.0.0.1:1", "backup", "verify", str(tampered), "--key-file", str(key), "--json")
        answer = json.loads(broken.stdout)
        assert broken.returncode == 1 and answer["code"] == "CORRUPT_BACKUP"
        assert "fails authentication" in answer["problems"][0]
        refused = raftbus_cli(cluster.bootstrap, "backup", "restore", str(tampered), "--key-file", str(key))
        assert refused.returncode == 1 and "CORRUPT_BACKUP" in refused.stderr

        with Admin(cluster.bootstrap) as admin:
            admin.delete_topic("sealed-orders")
            wait_until(lambda: "sealed-orders" not in {t.name for t in admin.list_topics()}, 30,
                       what="the topic deleted")
        restored = raftbus_cli(cluster.bootstrap, "backup", "restore", str(backup_dir), "--key-file", str(key),
                               "--json")
        assert restored.returncode == 0, restored.stderr
        assert records_of(cluster.bootstrap, "sealed-orders") == expected
        with Admin(cluster.bootstrap) as admin:
            assert {p.partition: p.committed_offset
                    for p in admin.describe_group("sealed-billing").partitions} == committed
