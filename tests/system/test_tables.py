"""System tests: key-value tables over compacted topics on real broker processes — a seeded workload compacted
while it runs and across a leader kill -9 checked against a model, compare-and-set races, a watch resumed after a
reconnect, the `raftbus kv` commands and bad input."""
from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time

import pytest

from raftbus.client import Admin, Reader, Table
from raftbus.client import errors
from tests.helpers import wait_until
from tests.system.conftest import running_cluster

pytestmark = pytest.mark.system

MIN_LAG_MS = 1_500
DELETE_RETENTION_MS = 3_000
FAST_COMPACTION = {"RAFTBUS_COMPACTION_CHECK_INTERVAL_MS": "200", "RAFTBUS_COMPACTION_COMMAND_BYTES_MAX": "65536"}


def raftbus(bootstrap: str, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", "from raftbus.cli import main; raise SystemExit(main())",
               "--bootstrap", bootstrap, *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, input=stdin)


def leader_of(bootstrap: str, topic: str, partition: int):
    with Admin(bootstrap) as admin:
        return admin.describe_topic(topic).partitions[partition].leader_id


def in_sync(bootstrap: str, topic: str):
    with Admin(bootstrap) as admin:
        parts = admin.describe_topic(topic).partitions
    return all(p.leader_id and len(p.isr) == 3 for p in parts) and parts


def compaction_removed(bootstrap: str) -> int:
    with Admin(bootstrap) as admin:
        return sum(s.compaction_bytes_removed for s in admin.broker_stats())


def whole_log(bootstrap: str, topic: str):
    with Reader(bootstrap) as reader:
        return list(reader.iter_topic(topic, from_beginning=True, stop_at_end=True))


class Writer(threading.Thread):
    """Puts and deletes over its own keys with a seeded generator, noting what each acknowledged write was."""

    def __init__(self, bootstrap: str, topic: str, seed: int, keys: list[bytes], writes: int):
        super().__init__(daemon=True)
        self.table = Table(bootstrap, topic)
        self.rng = random.Random(seed)
        self.keys, self.writes = keys, writes
        self.model: dict[bytes, bytes | None] = {}
        self.uncertain: set[bytes] = set()  # a write whose outcome is unknown (it failed after retries)
        self.acked: list[tuple[int, int, bytes, bytes | None, float]] = []  # (partition, offset, key, value, sent)
        self.done_writes = 0
        self.error = None

    def run(self):
        try:
            for n in range(self.writes):
                key = self.rng.choice(self.keys)
                value = None if self.rng.random() < 0.2 else b"%s=%d" % (key, n)
                sent = time.time()
                try:
                    revision = self.table.put(key, value)
                except errors.RaftbusError:
                    self.uncertain.add(key)
                    continue
                self.model[key] = value
                self.uncertain.discard(key)
                self.acked.append((self.table.partition_of(key), revision, key, value, sent))
                self.done_writes = n + 1
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.table.close()


def test_a_seeded_workload_compacted_while_it_runs_and_across_a_leader_kill_matches_the_model(tmp_path):
    """Puts and deletes over 300 keys, compacted while they run and while a partition leader is killed -9 and
    restarted: every key's latest value equals the model's, every replica's checksums agree, and no record newer
    than min_compaction_lag_ms nor tombstone newer than delete_retention_ms was removed."""
    with running_cluster(tmp_path, env=FAST_COMPACTION) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_table("state", partitions=2, min_compaction_lag_ms=MIN_LAG_MS,
                               delete_retention_ms=DELETE_RETENTION_MS, segment_bytes=2048)
        keys = [b"key-%03d" % i for i in range(300)]
        writers = [Writer(cluster.bootstrap, "state", seed, keys[seed::3], 700) for seed in range(3)]
        for w in writers:
            w.start()
        wait_until(lambda: sum(w.done_writes for w in writers) >= 600, 120, what="writes before the kill")
        wait_until(lambda: compaction_removed(cluster.bootstrap) > 0, 60, what="a compaction pass removing records")
        victim = leader_of(cluster.bootstrap, "state", 0)
        cluster.broker(victim).kill()
        wait_until(lambda: leader_of(cluster.bootstrap, "state", 0) not in (None, 0, victim), 30,
                   what="a new leader")
        wait_until(lambda: sum(w.done_writes for w in writers) >= 1300, 120, what="writes after the kill")
        cluster.broker(victim).start()
        wait_until(lambda: in_sync(cluster.bootstrap, "state"), 60, what="the killed broker back in sync")
        for w in writers:
            w.join(180)
            assert not w.is_alive() and w.error is None, w.error
        read_at = time.time()
        log = whole_log(cluster.bootstrap, "state")
        model = {k: v for w in writers for k, v in w.model.items() if k not in w.uncertain}
        acked = [a for w in writers for a in w.acked]
        assert len(model) > 250 and len(acked) > 1500

        with Table(cluster.bootstrap, "state") as table:
            for key, value in model.items():
                entry = table.get(key)
                assert (entry.value if entry else None) == value, key
        latest = {}
        for record in log:
            latest[record.key] = record
        for key, value in model.items():
            if value is not None:
                assert latest[key].value == value, key
        present = {(r.partition, r.offset) for r in log}
        young = [a for a in acked if a[4] > read_at - MIN_LAG_MS / 1000]
        assert all((p, o) in present for p, o, _, _, _ in young), "a record newer than the lag was removed"
        fresh_tombstones = [a for a in acked if a[3] is None and a[4] > read_at - DELETE_RETENTION_MS / 1000]
        assert all((p, o) in present for p, o, _, _, _ in fresh_tombstones), "a fresh tombstone was removed"
        assert len(log) < len(acked), "compaction removed nothing"
        offsets = [r.offset for r in log if r.partition == 0]
        assert offsets == sorted(set(offsets))

        time.sleep(0)  # the replicas compare at one log index: verify proposes its checkpoint after every write
        done = raftbus(cluster.bootstrap, "--json", "topics", "verify", "state")
        report = json.loads(done.stdout)
        assert done.returncode == 0 and all(p["replicas_agree"] for p in report["partitions"]), done.stdout


@pytest.fixture(scope="module")
def plain_cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("tables"), env=FAST_COMPACTION) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_table("kv", partitions=1)
            admin.create_table("kv3", partitions=3)
            admin.create_topic("events", partitions=1)
        yield cluster


def test_compare_and_set_races_between_two_clients_have_exactly_one_winner(plain_cluster):
    """Two clients that read the same revision and both compare-and-set: in every round exactly one wins."""
    bootstrap = plain_cluster.bootstrap
    with Table(bootstrap, "kv") as first, Table(bootstrap, "kv") as second:
        revision = first.put("counter", "0")
        for round_ in range(25):
            barrier = threading.Barrier(2)
            outcomes = {}

            def contend(name, table, seen=revision):
                barrier.wait()
                try:
                    outcomes[name] = table.put("counter", f"{name}-{round_}", expected_revision=seen)
                except errors.RevisionMismatch:
                    outcomes[name] = "conflict"
            threads = [threading.Thread(target=contend, args=(n, t)) for n, t in (("a", first), ("b", second))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            winners = [n for n, o in outcomes.items() if o != "conflict"]
            assert len(outcomes) == 2 and len(winners) == 1, outcomes
            revision = outcomes[winners[0]]
            assert first.get("counter").value == f"{winners[0]}-{round_}".encode()


def test_a_watch_sees_every_change_exactly_once_across_a_reconnect(plain_cluster):
    """A watch sees the current values then every change; a new watch resumed from the first one's position after
    it was closed sees exactly the changes made in between and after, none twice."""
    bootstrap = plain_cluster.bootstrap
    with Table(bootstrap, "kv3") as table:
        before = {f"w{i}": table.put(f"w{i}", "start") for i in range(6)}
        seen: list = []
        watch = table.watch("w")
        wait_until(lambda: seen.extend([next(watch)]) or len(seen) >= 6, 30, interval_s=0, what="snapshot")
        assert {e.key.decode(): e.revision for e in seen[:6]} == before
        written = [(table.partition_of(f"w{i % 6}"), table.put(f"w{i % 6}", f"v{i}")) for i in range(10)]
        for _ in range(10):
            seen.append(next(watch))
        position = dict(watch.position)
        watch.close()
        written += [(table.partition_of(f"w{i % 6}"), table.put(f"w{i % 6}", f"after-close-{i}")) for i in range(8)]
        written.append((table.partition_of("w0"), table.delete("w0")))
        resumed = table.watch("w", after=position)
        for _ in range(9):
            seen.append(next(resumed))
        resumed.close()
    changes = [(e.partition, e.revision) for e in seen[6:]]
    assert len(changes) == len(set(changes)) == 19 and set(changes) == set(written)
    assert [e.key for e in seen if e.deleted] == [b"w0"]


def test_the_kv_commands_and_bad_input(plain_cluster):
    """`raftbus kv` puts, gets, lists, compares-and-sets, deletes and watches; bad input gets typed errors: a CAS or
    a key read on a topic without compaction, a key over the limit, a record without a key on a compacted topic."""
    bootstrap = plain_cluster.bootstrap
    assert raftbus(bootstrap, "kv", "put", "kv", "color", "blue").stdout.strip().isdigit()
    assert raftbus(bootstrap, "kv", "get", "kv", "color").stdout == "blue\n"
    revision = int(raftbus(bootstrap, "kv", "put", "kv", "size", "L").stdout)
    stale = raftbus(bootstrap, "kv", "put", "kv", "size", "XL", "--expected-revision", str(revision - 1))
    assert stale.returncode == 1 and "REVISION_MISMATCH" in stale.stderr
    assert raftbus(bootstrap, "kv", "put", "kv", "size", "XL", "--expected-revision", str(revision)).returncode == 0
    assert raftbus(bootstrap, "kv", "ls", "kv").stdout.split() == ["color", "counter", "size"] or \
        set(raftbus(bootstrap, "kv", "ls", "kv").stdout.split()) >= {"color", "size"}
    assert raftbus(bootstrap, "kv", "del", "kv", "color").returncode == 0
    assert raftbus(bootstrap, "kv", "get", "kv", "color").returncode == 1
    history = raftbus(bootstrap, "--json", "kv", "history", "kv", "size").stdout.splitlines()
    assert [json.loads(line)["value"] for line in history] == ["L", "XL"]
    watched = raftbus(bootstrap, "--json", "kv", "watch", "kv", "--prefix", "si", "--max", "1").stdout
    assert json.loads(watched)["value"] == "XL"

    for argv, code in ((("kv", "put", "events", "a", "b", "--expected-revision", "-1"), "NOT_COMPACTED"),
                       (("kv", "get", "events", "a"), "NOT_COMPACTED"),
                       (("kv", "put", "kv", "k" * 501, "v"), "KEY_TOO_LARGE")):
        done = raftbus(bootstrap, *argv)
        assert done.returncode == 1 and code in done.stderr, (argv, done.stderr)
    done = raftbus(bootstrap, "produce", "kv", "--value", "no key")
    assert done.returncode == 1 and "KEY_REQUIRED" in done.stderr, done.stderr
    with Table(bootstrap, "kv") as table, pytest.raises(errors.KeyTooLarge):
        table.put(b"x" * 600, b"v")


def test_the_asyncio_table_does_what_the_table_does(plain_cluster):
    """AsyncTable puts, compares-and-sets, gets, lists, reads history and watches as Table does, on grpc.aio."""
    import asyncio

    from raftbus.client.aio import AsyncTable

    async def scenario():
        async with AsyncTable(plain_cluster.bootstrap, "kv3") as table:
            first = await table.put("async-a", "1")
            with pytest.raises(errors.RevisionMismatch):
                await table.put("async-a", "x", expected_revision=first + 1000)
            second = await table.put("async-a", "2", expected_revision=first)
            await table.put("async-b", "1")
            assert (await table.get("async-a")).value == b"2" and (await table.get("nothing")) is None
            assert [k for k in await table.keys("async-")] == [b"async-a", b"async-b"]
            assert [e.value for e in await table.history("async-a")] == [b"1", b"2"]
            position: dict = {}
            watch = table.watch("async-", position=position)
            snapshot = [await watch.__anext__() for _ in range(2)]
            assert {e.key: e.revision for e in snapshot}[b"async-a"] == second
            deleted = await table.delete("async-a")
            event = await asyncio.wait_for(watch.__anext__(), 30)
            await watch.aclose()
            assert (event.key, event.deleted, event.revision) == (b"async-a", True, deleted)
            assert position[event.partition] == deleted

    asyncio.run(scenario())
