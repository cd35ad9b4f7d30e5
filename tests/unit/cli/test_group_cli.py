"""Goal: `raftbus consume --group` prints records as a group member and commits exactly what it printed, and
`raftbus groups list|describe` print members, assignment, committed offsets and lag (as tables or --json)."""
import json
from types import SimpleNamespace

import pytest

from raftbus.cli import app as cli
from raftbus.cli import groups as group_cli
from raftbus.client.groups.fetcher import ConsumerRecords
from raftbus.client.groups.admin import GroupDescription, MemberDescription, PartitionLag
from raftbus.client.groups.calls import TopicPartition
from raftbus.client.records import Record

T0, T1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
GROUP = GroupDescription(
    name="billing", generation=42, state="rebalancing", topics=("orders",),
    members=(MemberDescription("m-1", "cli", ("orders",), 45_000, 60_000, 5, (T0,), (T0,)),
             MemberDescription("m-2", "", ("orders",), 45_000, 60_000, 6, (), (T1,))),
    created_ms=1, changed_ms=2,
    partitions=(PartitionLag("orders", 0, "m-1", 10, 0, 15, 5, 2.5),
                PartitionLag("orders", 1, None, None, 0, 7, None, None)))


class FakeRecords(ConsumerRecords):
    def __init__(self, records):
        super().__init__()
        self._records = records
        self._count = len(records)

    def __iter__(self):
        return iter(self._records)


@pytest.fixture
def seen(monkeypatch):
    seen = []

    class FakeConsumer:
        def __init__(self, bootstrap, **options):
            seen.append(("Consumer", bootstrap, options))
            self.polls = [[Record("orders", 0, 10, None, b"a", (), 1), Record("orders", 1, 3, b"k", b"b", (), 2)],
                          [], [Record("orders", 0, 11, None, b"c", (), 3)]]

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            seen.append(("close",))

        def poll(self, timeout_s, max_records=None):
            seen.append(("poll", max_records))
            records = self.polls.pop(0) if self.polls else []
            return FakeRecords(records[:max_records] if max_records else records)

        def commit(self, offsets):
            seen.append(("commit", offsets))

    class FakeAdmin:
        def __init__(self, bootstrap=None, **options):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def list_groups(self):
            return [GROUP]

        def describe_group(self, name):
            seen.append(("describe_group", name))
            return GROUP

        def describe_topic(self, name):
            return SimpleNamespace(name=name, kind="stream")

    monkeypatch.setattr(group_cli, "Consumer", FakeConsumer)
    monkeypatch.setattr(group_cli, "Admin", FakeAdmin)
    monkeypatch.setattr(cli, "Admin", FakeAdmin)  # consume asks the topic's kind first
    return seen


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_consume_with_group_commits_what_it_printed(seen, capsys):
    """Each poll's printed records are committed (offset + 1 per partition); --max stops exactly there."""
    code, out, _ = run(capsys, "--bootstrap", "h:1", "consume", "orders", "--group", "billing", "--from-beginning",
                       "--max", "3")
    assert code == 0
    assert out.splitlines() == ["orders/0@10\t\ta", "orders/1@3\tk\tb", "orders/0@11\t\tc"]
    assert seen[0] == ("Consumer", "h:1", {"group": "billing", "topics": ["orders"], "auto_offset_reset": "earliest",
                                           "enable_auto_commit": False, "client_id": "raftbus-cli"})
    commits = [s[1] for s in seen if s[0] == "commit"]
    assert commits == [{("orders", 0): 11, ("orders", 1): 4}, {("orders", 0): 12}]
    assert [s[1] for s in seen if s[0] == "poll"] == [3, 1, 1] and seen[-1] == ("close",)


def test_consume_with_group_stops_when_idle(seen, capsys):
    """--timeout-ms ends the command after that long without a record; latest is the default start."""
    code, _, _ = run(capsys, "consume", "orders", "--group", "billing", "--timeout-ms", "0")
    assert code == 0 and seen[0][2]["auto_offset_reset"] == "latest"
    assert [s[0] for s in seen].count("poll") == 2


def test_consume_group_refuses_partition_flags(seen, capsys):
    """--group with --partition is a usage error (exit 2), nothing is started."""
    code, _, err = run(capsys, "consume", "orders", "--group", "billing", "--partition", "0")
    assert code == 2 and "--group" in err and seen == []


def test_groups_list_table_and_json(seen, capsys):
    """`groups list` prints one row per group (state, generation, members, topics), or JSON with --json."""
    code, out, _ = run(capsys, "groups", "list")
    assert code == 0
    assert out.splitlines()[0].split() == ["GROUP", "STATE", "GENERATION", "MEMBERS", "TOPICS"]
    assert out.splitlines()[1].split() == ["billing", "rebalancing", "42", "2", "orders"]
    code, out, _ = run(capsys, "groups", "list", "--json")
    assert json.loads(out)[0]["name"] == "billing"


def test_groups_describe_shows_members_offsets_and_lag(seen, capsys):
    """`groups describe` prints members with owned and pending partitions, then offsets and lag per partition."""
    code, out, _ = run(capsys, "groups", "describe", "billing")
    assert code == 0 and ("describe_group", "billing") in seen
    lines = [line.split() for line in out.splitlines() if line.strip()]
    assert lines[0][:3] == ["group", "billing", "state=rebalancing"]
    assert ["m-2", "-", "-", "orders/1"] in lines
    assert ["orders", "0", "m-1", "10", "0", "15", "5", "2.500"] in lines
    assert ["orders", "1", "-", "-", "0", "7", "-", "-"] in lines
    code, out, _ = run(capsys, "--json", "groups", "describe", "billing")
    data = json.loads(out)
    assert data["partitions"][0]["lag_s"] == 2.5 and data["members"][1]["target"] == [["orders", 1]]


def test_bench_consume_group_flags(capsys):
    """`bench consume --group` takes --no-decode and --session-timeout-ms, checked before any cluster starts."""
    args = cli.build_parser().parse_args(["bench", "consume", "--group", "--no-decode", "--session-timeout-ms", "7000"])
    assert (args.workload, args.group, args.decode, args.session_timeout_ms) == ("consume", True, False, 7000)
    defaults = cli.build_parser().parse_args(["bench", "consume"])
    assert (defaults.group, defaults.decode, defaults.session_timeout_ms) == (False, True, 6000)
    code, _, err = run(capsys, "bench", "consume", "--group", "--session-timeout-ms", "0")
    assert code == 1 and err == "error: INVALID_ARGUMENT: --session-timeout-ms must be >= 1\n"


def test_bench_all_includes_the_group_consume(monkeypatch, capsys):
    """`bench all` runs produce, consume and consume-group (on the produce topic), queue, kafka, kv and aio on the
    benchmarked cluster, then scale, failover and idle on fresh clusters: after stopping a cluster it started, after
    letting one that stays up (--bootstrap) go quiet; `consume --group` only the group figures."""
    from contextlib import contextmanager

    from raftbus.bench import aio as aio_bench
    from raftbus.bench import kafka as kafka_bench
    from raftbus.bench import runner as bench

    ran = []

    @contextmanager
    def cluster_for(args):
        ran.append("cluster up")
        yield args.bootstrap or "local:1"
        ran.append("cluster down")
    monkeypatch.setattr(bench, "cluster_for", cluster_for)
    monkeypatch.setattr(bench, "bench_produce", lambda b, a: ran.append("produce") or {"bench": "produce",
                                                                                      "topic": "t1"})
    monkeypatch.setattr(bench, "bench_consume", lambda b, a, t: ran.append(("consume", t)) or {"bench": "consume"})
    monkeypatch.setattr(bench, "bench_group_consume",
                        lambda b, a, t=None: ran.append(("consume-group", t)) or {"bench": "consume-group"})
    monkeypatch.setattr(bench.bench_queue, "bench_queue", lambda *a: ran.append("queue") or {"bench": "queue"})
    monkeypatch.setattr(bench.bench_ops, "bench_failover", lambda *a: ran.append("failover") or {"bench": "failover"})
    monkeypatch.setattr(bench.bench_ops, "bench_idle", lambda *a: ran.append("idle") or {"bench": "idle"})
    monkeypatch.setattr(aio_bench, "bench_aio", lambda *a: ran.append("aio") or {"bench": "aio"})
    monkeypatch.setattr(kafka_bench, "bench_kafka", lambda *a: ran.append("kafka") or {"bench": "kafka"})
    monkeypatch.setattr(bench.bench_kv, "bench_kv", lambda *a: ran.append("kv") or {"bench": "kv"})
    monkeypatch.setattr(bench.bench_scale, "bench_scale", lambda *a: ran.append("scale") or {"bench": "scale"})
    monkeypatch.setattr(bench, "settle_before_fresh_clusters", lambda b: ran.append(("settle", b)))
    workloads = ["produce", "consume", "consume-group", "queue", "kafka", "kv", "aio", "scale", "failover", "idle"]
    on_cluster = ["produce", ("consume", "t1"), ("consume-group", "t1"), "queue", "kafka", "kv", "aio"]
    args = cli.build_parser().parse_args(["bench", "all", "--bootstrap", "h:1"])
    assert [r["bench"] for r in bench.run_benchmarks(args)] == workloads
    assert ran == ["cluster up", *on_cluster, ("settle", "h:1"), "cluster down", "scale", "failover", "idle"]
    ran.clear()
    args = cli.build_parser().parse_args(["bench", "all"])
    assert [r["bench"] for r in bench.run_benchmarks(args)] == workloads
    assert ran == ["cluster up", *on_cluster, "cluster down", "scale", "failover", "idle"]
    ran.clear()
    args = cli.build_parser().parse_args(["bench", "scale"])
    assert [r["bench"] for r in bench.run_benchmarks(args)] == ["scale"]
    assert ran == ["scale"]  # no cluster of its own to start first
    ran.clear()
    args = cli.build_parser().parse_args(["bench", "consume", "--group", "--bootstrap", "h:1"])
    assert [r["bench"] for r in bench.run_benchmarks(args)] == ["consume-group"]
    assert ran == ["cluster up", ("consume-group", None), "cluster down"]
