"""System tests: key-value tables over compacted topics on real broker processes — a seeded workload of puts,
deletes and tombstones compacted while it runs and across a leader kill -9 checked against a model, compare-and-set
races, a watch resumed after a reconnect, the `raftbus kv` commands and bad input."""
from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from typing import NamedTuple

import pytest

from raftbus.client import Admin, Producer, Reader, Table
from raftbus.client import errors
from tests.helpers import wait_until
from tests.helpers import running_cluster

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


def compaction_removed(bootstrap: str, exclude: int | None = None) -> int:
    with Admin(bootstrap) as admin:
        return sum(s.compaction_bytes_removed for s in admin.broker_stats() if s.broker_id != exclude)


def whole_log(bootstrap: str, topic: str):
    with Reader(bootstrap) as reader:
        return list(reader.iter_topic(topic, from_beginning=True, stop_at_end=True))


class Acked(NamedTuple):
    partition: int
    offset: int
    key: bytes
    value: bytes | None
    sent: float  # time.time() before the write was sent: its append time is later


class Writer(threading.Thread):
    """Puts, deletes (Table.delete) and tombstones (a producer's record with a key and no value) over its own keys
    with a seeded generator, noting what each acknowledged write was."""

    def __init__(self, bootstrap: str, topic: str, seed: int, keys: list[bytes], writes: int):
        super().__init__(daemon=True)
        self.table = Table(bootstrap, topic)
        self.producer = Producer(bootstrap, linger_ms=0)
        self.topic = topic
        self.rng = random.Random(seed)
        self.keys, self.writes = keys, writes
        self.model: dict[bytes, bytes | None] = {}
        self.uncertain: set[bytes] = set()  # a write whose outcome is unknown (it failed after retries)
        self.acked: list[Acked] = []
        self.done_writes = 0
        self.error = None

    def write(self, key: bytes, value: bytes | None, how: float) -> tuple[int, int]:
        if value is not None:
            return self.table.partition_of(key), self.table.put(key, value)
        if how < 0.5:
            return self.table.partition_of(key), self.table.delete(key)
        written = self.producer.send(self.topic, None, key=key).result(60)
        return written.partition, written.offset

    def run(self):
        try:
            for n in range(self.writes):
                key = self.rng.choice(self.keys)
                value = None if self.rng.random() < 0.2 else b"%s=%d" % (key, n)
                how = self.rng.random()
                sent = time.time()
                try:
                    partition, offset = self.write(key, value, how)
                except errors.RaftbusError:
                    self.uncertain.add(key)
                    continue
                self.model[key] = value
                self.uncertain.discard(key)
                self.acked.append(Acked(partition, offset, key, value, sent))
                self.done_writes = n + 1
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.table.close()
            self.producer.close()


def check_nothing_young_removed(bootstrap: str, topic: str, writers: list[Writer]) -> int:
    """Read the whole log and check that every acknowledged record younger than min_compaction_lag_ms and every
    tombstone younger than delete_retention_ms (young through the whole read, by the time it ended) is in it;
    how many young records there were."""
    acked = [a for w in writers for a in list(w.acked)]  # acknowledged before the read: below its end
    present = {(r.partition, r.offset) for r in whole_log(bootstrap, topic)}
    read_end = time.time()
    young = [a for a in acked if a.sent > read_end - MIN_LAG_MS / 1000]
    missing = [a for a in young if (a.partition, a.offset) not in present]
    assert not missing, f"records newer than the lag were removed: {missing[:5]}"
    fresh = [a for a in acked if a.value is None and a.sent > read_end - DELETE_RETENTION_MS / 1000]
    missing = [a for a in fresh if (a.partition, a.offset) not in present]
    assert not missing, f"tombstones newer than delete_retention_ms were removed: {missing[:5]}"
    return len(young)


def test_a_seeded_workload_compacted_while_it_runs_and_across_a_leader_kill_matches_the_model(tmp_path):
    """Puts, deletes and tombstones over 300 keys, compacted while they run and while a partition leader is killed
    -9 and restarted: every key's latest value equals the model's, every replica's checksums agree, and at every
    look no record newer than min_compaction_lag_ms nor tombstone newer than delete_retention_ms was removed."""
    with running_cluster(tmp_path, env=FAST_COMPACTION) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_table("state", partitions=2, min_compaction_lag_ms=MIN_LAG_MS,
                               delete_retention_ms=DELETE_RETENTION_MS, segment_bytes=2048)
        keys = [b"key-%03d" % i for i in range(300)]
        writers = [Writer(cluster.bootstrap, "state", seed, keys[seed::3], 700) for seed in range(3)]
        for w in writers:
            w.start()
        young_seen = 0
        wait_until(lambda: sum(w.done_writes for w in writers) >= 600, 120, what="writes before the kill")
        wait_until(lambda: compaction_removed(cluster.bootstrap) > 0, 60, what="a compaction pass removing records")
        young_seen += check_nothing_young_removed(cluster.bootstrap, "state", writers)
        victim = leader_of(cluster.bootstrap, "state", 0)
        removed_by_others = compaction_removed(cluster.bootstrap, exclude=victim)
        cluster.broker(victim).kill()
        wait_until(lambda: leader_of(cluster.bootstrap, "state", 0) not in (None, 0, victim), 30,
                   what="a new leader")
        wait_until(lambda: compaction_removed(cluster.bootstrap, exclude=victim) > removed_by_others, 60,
                   what="a compaction pass by the brokers left")
        young_seen += check_nothing_young_removed(cluster.bootstrap, "state", writers)
        wait_until(lambda: sum(w.done_writes for w in writers) >= 1300, 120, what="writes after the kill")
        cluster.broker(victim).start()
        wait_until(lambda: in_sync(cluster.bootstrap, "state"), 60, what="the killed broker back in sync")
        young_seen += check_nothing_young_removed(cluster.bootstrap, "state", writers)
        for w in writers:
            w.join(180)
            assert not w.is_alive() and w.error is None, w.error
        young_seen += check_nothing_young_removed(cluster.bootstrap, "state", writers)
        assert young_seen > 0, "no look found a record newer than the lag: the check saw nothing to check"
        log = whole_log(cluster.bootstrap, "state")
        model = {k: v for w in writers for k, v in w.model.items() if k not in w.uncertain}
        acked = [a for w in writers for a in w.acked]
        assert len(model) > 250 and len(acked) > 1500
        assert sum(1 for a in acked if a.value is None) > 100

        with Table(cluster.bootstrap, "state") as table:
            for key, value in model.items():
                entry = table.get(key)
                assert (entry.value if entry else None) == value, key
            assert set(table.keys()) >= {k for k, v in model.items() if v is not None}
        latest = {}
        for record in log:
            latest[record.key] = record
        for key, value in model.items():
            assert (latest[key].value if key in latest else None) == value, key
        assert len(log) < len(acked), "compaction removed nothing"
        for partition in (0, 1):
            offsets = [r.offset for r in log if r.partition == partition]
            assert offsets == sorted(set(offsets))

        done = raftbus(cluster.bootstrap, "--json", "topics", "verify", "state")
        report = json.loads(done.stdout)
        assert done.returncode == 0 and all(p["replicas_agree"] for p in report["partitions"]), done.stdout
        assert len(report["partitions"]) == 2


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


def test_a_watch_sees_every_change_exactly_once_across_a_leader_kill(plain_cluster):
    """A watch keeps going while the leader of the table's partition is killed -9 (its stream reconnects to the new
    leader and resumes after the last revision it handed out): every acknowledged change is seen exactly once, and
    nothing that was never written is seen."""
    bootstrap = plain_cluster.bootstrap
    topic = "kvkill"
    with Admin(bootstrap) as admin:
        admin.create_table(topic, partitions=1)
    seen: list = []
    with Table(bootstrap, topic) as writer, Table(bootstrap, topic) as watcher:
        writer.put("x-start", "0")
        watch = watcher.watch("x-")
        def follow():
            try:
                for event in watch:
                    seen.append(event)
            except errors.Unavailable:
                pass  # the table closed at the end of the test (a failure before shows in what was seen)
        threading.Thread(target=follow, daemon=True).start()
        wait_until(lambda: len(seen) >= 1, 30, what="the watch's snapshot")
        acked, attempted = {}, set()

        def write(i: int) -> None:
            value = f"v{i}".encode()
            attempted.add(value)
            try:
                acked[value] = writer.put(f"x-{i % 4}", value)
            except errors.RaftbusError:
                pass  # outcome unknown: it may or may not be seen, but at most once
        for i in range(15):
            write(i)
        victim = leader_of(bootstrap, topic, 0)
        plain_cluster.broker(victim).kill()
        try:
            for i in range(15, 40):
                write(i)
            wait_until(lambda: set(acked) <= {e.value for e in seen}, 60, what="every acknowledged change seen")
        finally:
            plain_cluster.broker(victim).start()
            wait_until(lambda: in_sync(bootstrap, topic), 90, what="the killed broker back in sync")
    changes = [e.value for e in seen[1:]]
    assert len(acked) >= 30 and seen[0].value == b"0"
    assert len(changes) == len(set(changes)), "a change was seen twice"
    assert set(changes) <= attempted and set(acked) <= set(changes)
    assert all(e.revision == acked[e.value] for e in seen[1:] if e.value in acked)


def test_the_kv_commands_and_bad_input(plain_cluster):
    """`raftbus kv` puts, gets, lists, compares-and-sets, deletes and watches; bad input gets typed errors and writes
    nothing: a CAS or a key read on a topic without compaction, a key over the limit, a record without a key on a
    compacted topic (SDK and CLI)."""
    bootstrap = plain_cluster.bootstrap
    assert raftbus(bootstrap, "kv", "put", "kv", "cli.color", "blue").stdout.strip().isdigit()
    assert raftbus(bootstrap, "kv", "get", "kv", "cli.color").stdout == "blue\n"
    revision = int(raftbus(bootstrap, "kv", "put", "kv", "cli.size", "L").stdout)
    stale = raftbus(bootstrap, "kv", "put", "kv", "cli.size", "XL", "--expected-revision", str(revision - 1))
    assert stale.returncode == 1 and "REVISION_MISMATCH" in stale.stderr
    assert raftbus(bootstrap, "kv", "put", "kv", "cli.size", "XL", "--expected-revision", str(revision)).returncode == 0
    assert raftbus(bootstrap, "kv", "ls", "kv", "--prefix", "cli.").stdout.split() == ["cli.color", "cli.size"]
    assert raftbus(bootstrap, "kv", "del", "kv", "cli.color").returncode == 0
    assert raftbus(bootstrap, "kv", "get", "kv", "cli.color").returncode == 1
    assert raftbus(bootstrap, "kv", "ls", "kv", "--prefix", "cli.").stdout.split() == ["cli.size"]
    history = raftbus(bootstrap, "--json", "kv", "history", "kv", "cli.size").stdout.splitlines()
    assert [json.loads(line)["value"] for line in history] == ["L", "XL"]
    watched = raftbus(bootstrap, "--json", "kv", "watch", "kv", "--prefix", "cli.si", "--max", "1").stdout
    assert json.loads(watched)["value"] == "XL"

    with Reader(bootstrap) as reader:
        ends_before = {t: reader.offsets(t, 0)[1] for t in ("kv", "events")}
    for argv, code in ((("kv", "put", "events", "a", "b", "--expected-revision", "-1"), "NOT_COMPACTED"),
                       (("kv", "get", "events", "a"), "NOT_COMPACTED"),
                       (("kv", "put", "kv", "k" * 501, "v"), "KEY_TOO_LARGE")):
        done = raftbus(bootstrap, *argv)
        assert done.returncode == 1 and code in done.stderr, (argv, done.stderr)
    done = raftbus(bootstrap, "produce", "kv", "--value", "no key")
    assert done.returncode == 1 and "KEY_REQUIRED" in done.stderr, done.stderr
    with Table(bootstrap, "events") as plain:
        with pytest.raises(errors.NotCompacted):
            plain.put("a", "b", expected_revision=Table.NO_REVISION)
        with pytest.raises(errors.NotCompacted):
            plain.get("a")
    with Table(bootstrap, "kv") as table:
        with pytest.raises(errors.KeyTooLarge):
            table.put(b"x" * 600, b"v")
        with pytest.raises(errors.InvalidArgument):
            table.put("k", "v", expected_revision=-2)
    with Producer(bootstrap, linger_ms=0) as producer:
        with pytest.raises(errors.KeyRequired):
            producer.send("kv", b"no key", partition=0).result(30)
        with pytest.raises(errors.KeyTooLarge):
            producer.send("kv", b"v", key=b"y" * 501).result(30)
    with Reader(bootstrap) as reader:
        assert {t: reader.offsets(t, 0)[1] for t in ("kv", "events")} == ends_before


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
